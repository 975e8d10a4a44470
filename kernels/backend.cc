// The Backend ops with a default made of other ops (backends override them to fuse).
#include "kernels/backend.h"

#include "common/status.h"

namespace xserv::kernels {

absl::Status Backend::QkNormRopeWriteKv(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const QkNormRope& p, const KvLayer& kv,
                                        const Tensor& slot_mapping) {
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return absl::InvalidArgumentError("QkNormRopeWriteKv: q_norm and k_norm come together");
  }
  if ((p.positions == nullptr) != (p.cos_sin == nullptr)) {
    return absl::InvalidArgumentError("QkNormRopeWriteKv: positions and cos_sin come together");
  }
  if (p.q_norm != nullptr) {
    RETURN_IF_ERROR(RmsNorm(q, *p.q_norm, p.eps, q));
    RETURN_IF_ERROR(RmsNorm(k, *p.k_norm, p.eps, k));
  }
  if (p.cos_sin != nullptr) {
    RETURN_IF_ERROR(Rope(q, *p.positions, *p.cos_sin));
    RETURN_IF_ERROR(Rope(k, *p.positions, *p.cos_sin));
  }
  return WriteKv(k, v, kv, slot_mapping);
}

}  // namespace xserv::kernels
