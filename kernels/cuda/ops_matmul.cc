// CudaBackend::Matmul: validation, then one cuBLASLt GEMM through the plan cache (gemm.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/op_util.h"

namespace xserv::kernels::cuda {
namespace {

// cuBLASLt's leading dimension: the row stride, which a single row may leave below cols.
absl::StatusOr<int64_t> LeadingDim(const char* op, const char* name, const Tensor& t) {
  if (t.dim(0) <= 1) return std::max(t.stride(0), t.dim(1));
  if (t.stride(0) < t.dim(1)) {
    return OpError(op, absl::StrCat(name, " rows overlap: stride ", t.stride(0), " < ", t.dim(1)));
  }
  return t.stride(0);
}

}  // namespace

absl::Status CudaBackend::Matmul(const Tensor& x, const Tensor& w, const Tensor* bias,
                                 const Tensor& out) {
  constexpr const char* kOp = "Matmul";
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectCuda(kOp, "w", w));
  RETURN_IF_ERROR(ExpectDType(kOp, "w", w, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(kOp, "w", w, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "w", w));
  RETURN_IF_ERROR(ExpectDim(kOp, "w", w, 1, x.dim(1)));
  RETURN_IF_ERROR(ExpectCuda(kOp, "out", out));
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) {
    return OpError(kOp, absl::StrCat("out must be bf16 or f32, got ", out.Describe()));
  }
  RETURN_IF_ERROR(ExpectRank(kOp, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 1, w.dim(0)));
  if (x.dim(1) < 1) return OpError(kOp, "inner dimension must be positive");
  ASSIGN_OR_RETURN(const int64_t ldx, LeadingDim(kOp, "x", x));
  ASSIGN_OR_RETURN(const int64_t ldw, LeadingDim(kOp, "w", w));
  ASSIGN_OR_RETURN(const int64_t ldo, LeadingDim(kOp, "out", out));
  GemmCall call{.x = x.data,
                .ldx = ldx,
                .w = w.data,
                .ldw = ldw,
                .out = out.data,
                .ldo = ldo,
                .out_type = *ElemTypeOf(out.dtype),
                .m = x.dim(0),
                .n = w.dim(0),
                .k = x.dim(1)};
  if (bias != nullptr) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "bias", *bias));
    RETURN_IF_ERROR(ExpectRank(kOp, "bias", *bias, 1));
    RETURN_IF_ERROR(ExpectDim(kOp, "bias", *bias, 0, w.dim(0)));
    if (bias->dtype != DType::kBF16 && bias->dtype != DType::kF32) {
      return OpError(kOp, absl::StrCat("bias must be bf16 or f32, got ", bias->Describe()));
    }
    call.bias = bias->data;
    call.bias_type = *ElemTypeOf(bias->dtype);
  }
  RETURN_IF_ERROR(gemm_->Run(call, stream_));
  return Launched(kOp, cudaGetLastError());
}

}  // namespace xserv::kernels::cuda
