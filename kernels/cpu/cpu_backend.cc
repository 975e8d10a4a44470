// CpuBackend: construction, memory and dtype conversion. The ops live in one file per family.
#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/safetensors/float_convert.h"
#include "common/status.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : pool_(options.num_threads), fuse_norm_matmul_(options.fuse_norm_matmul) {
  openblas_set_num_threads(options.num_threads);
}

absl::StatusOr<Buffer> CpuBackend::Allocate(DType dtype, std::span<const int64_t> shape) {
  if (shape.size() > kMaxRank) return OpError("Allocate", "rank above 4");
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return OpError("Allocate", "negative dimension");
    count *= d;
  }
  // 64-byte alignment for vector loads; zeroed so fresh KV blocks and scratch are deterministic.
  const size_t bytes = ((std::max<int64_t>(count, 1) * DTypeSize(dtype) + 63) / 64) * 64;
  void* data = std::aligned_alloc(64, bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("CPU allocation of ", bytes, " bytes failed"));
  }
  std::memset(data, 0, bytes);
  return Buffer(MakeTensor(data, dtype, DeviceType::kCpu, shape), [](void* p) { std::free(p); });
}

absl::Status CpuBackend::CopyFromHost(const void* src, const Tensor& dst) {
  RETURN_IF_ERROR(ExpectContiguous("CopyFromHost", "dst", dst));
  std::memcpy(dst.data, src, dst.nbytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(const Tensor& src, void* dst) {
  RETURN_IF_ERROR(ExpectContiguous("CopyToHost", "src", src));
  std::memcpy(dst, src.data, src.nbytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::Zero(const Tensor& t) {
  RETURN_IF_ERROR(ExpectContiguous("Zero", "t", t));
  if (t.numel() > 0) std::memset(t.data, 0, t.nbytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::Convert(const Tensor& src, const Tensor& dst) {
  constexpr const char* kOp = "Convert";
  RETURN_IF_ERROR(ExpectSameShape(kOp, src, dst));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "src", src));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "dst", dst));
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, src.nbytes());
    return absl::OkStatus();
  }
  if (dst.dtype == DType::kF32) {
    return safetensors::ConvertToFloat(
        src.dtype, std::span<const std::byte>(static_cast<const std::byte*>(src.data), src.nbytes()),
        std::span<float>(dst.as<float>(), n));
  }
  if (src.dtype == DType::kF32 && (dst.dtype == DType::kBF16 || dst.dtype == DType::kF16)) {
    const float* in = src.as<float>();
    uint16_t* out = dst.as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = dst.dtype == DType::kBF16 ? safetensors::FloatToBf16(in[i])
                                         : safetensors::FloatToF16(in[i]);
    }
    return absl::OkStatus();
  }
  return OpError(kOp, absl::StrCat("unsupported conversion ", src.Describe(), " -> ",
                                   dst.Describe()));
}

}  // namespace xserv::kernels::cpu
