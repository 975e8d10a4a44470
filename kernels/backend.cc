// The Backend ops with a default made of other ops (backends override them to fuse).
#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::kernels {
namespace {

// Head h of x [T, heads, head_dim] as a [T, head_dim] view (rows token-strided).
Tensor HeadView(const Tensor& x, int64_t h) {
  Tensor view = x;
  view.data = static_cast<char*>(x.data) + h * x.stride(1) * static_cast<int64_t>(DTypeSize(x.dtype));
  view.rank = 2;
  view.shape = {x.dim(0), x.dim(2), 0, 0};
  view.strides = {x.stride(0), x.stride(2), 0, 0};
  return view;
}

}  // namespace

bool Backend::TakesStridedQkNormRope(int64_t /*head_dim*/) const { return false; }

absl::Status Backend::MatmulSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                    const Tensor& act) {
  if (gate_up.rank != 2 || gate_up.dim(1) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatmulSiluMul: gate_up must be [rows, 2 * I], got ", gate_up.Describe()));
  }
  RETURN_IF_ERROR(Matmul(x, w, nullptr, gate_up));
  const int64_t inter = gate_up.dim(1) / 2;
  return SiluMul(gate_up.SliceLast(0, inter), gate_up.SliceLast(inter, 2 * inter), act);
}

absl::Status Backend::SiluMulMatmulFp8(const Tensor& gate, const Tensor& up, const Tensor& act,
                                       const Fp8Weight& w, const Tensor& out) {
  RETURN_IF_ERROR(SiluMul(gate, up, act));
  return MatmulFp8(act, w, nullptr, out);
}

bool Backend::WantsFp8DownTransposed(int64_t /*hidden*/, int64_t /*inter*/,
                                     int64_t /*block*/) const {
  return false;
}

absl::Status Backend::GatedMlpRowFp8(const PreNorm* /*norm*/, const Tensor& /*normed*/,
                                     const Fp8Weight& /*gate_up*/, const Fp8Weight& /*down_t*/,
                                     const Tensor& /*out*/) {
  return absl::UnimplementedError(absl::StrCat(name(), ": no one-op gated MLP"));
}

absl::Status Backend::AddRmsNormMatmul(const PreNorm& norm, const MatmulWeight& w,
                                       const Tensor* bias, const Tensor& out) {
  if ((w.dense == nullptr) == (w.fp8 == nullptr)) {
    return absl::InvalidArgumentError(
        "AddRmsNormMatmul: give exactly one of a dense and an FP8 weight");
  }
  RETURN_IF_ERROR(Add(norm.residual, norm.x, norm.residual_out));
  RETURN_IF_ERROR(RmsNorm(norm.residual_out, norm.weight, norm.eps, norm.normed));
  return w.dense != nullptr ? Matmul(norm.normed, *w.dense, bias, out)
                            : MatmulFp8(norm.normed, *w.fp8, bias, out);
}

absl::Status Backend::ExpertsAddRmsNorm(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                        const ExpertWeights& experts, const GluParams& glu,
                                        const Tensor& out, const Tensor& residual,
                                        const Tensor& norm_weight, float eps,
                                        const Tensor& normed) {
  RETURN_IF_ERROR(Experts(x, ids, weights, experts, glu, out));
  return AddRmsNorm(out, residual, norm_weight, eps, normed);
}

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
    // Packed heads in one call; the heads of a stacked projection's slices one at a time.
    for (const auto& [x, w] : {std::pair{&q, p.q_norm}, std::pair{&k, p.k_norm}}) {
      if (x->rank != 3 || x->stride(0) == x->dim(1) * x->stride(1)) {
        RETURN_IF_ERROR(RmsNorm(*x, *w, p.eps, *x));
        continue;
      }
      for (int64_t h = 0; h < x->dim(1); ++h) {
        const Tensor head = HeadView(*x, h);
        RETURN_IF_ERROR(RmsNorm(head, *w, p.eps, head));
      }
    }
  }
  if (p.cos_sin != nullptr) {
    RETURN_IF_ERROR(Rope(q, *p.positions, *p.cos_sin));
    RETURN_IF_ERROR(Rope(k, *p.positions, *p.cos_sin));
  }
  return WriteKv(k, v, kv, slot_mapping);
}

}  // namespace xserv::kernels
