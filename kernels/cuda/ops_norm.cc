// CudaBackend normalisation ops: validation, then one launch each (norm.cu).
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/op_util.h"

namespace xserv::kernels::cuda {
namespace {

absl::Status CheckNormArgs(const char* op, const Tensor& x, const Tensor& weight,
                           const Tensor& out) {
  for (const Tensor* t : {&x, &weight, &out}) {
    RETURN_IF_ERROR(ExpectCuda(op, "operand", *t));
    RETURN_IF_ERROR(ExpectDType(op, "operand", *t, DType::kBF16));
  }
  RETURN_IF_ERROR(ExpectRowMajor(op, "x", x));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(op, x, out));
  RETURN_IF_ERROR(ExpectRank(op, "weight", weight, 1));
  RETURN_IF_ERROR(ExpectDim(op, "weight", weight, 0, x.dim(-1)));
  return ExpectIntRange(op, "rows", AsRows(x).rows);
}

}  // namespace

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                  const Tensor& out) {
  RETURN_IF_ERROR(CheckNormArgs("RmsNorm", x, weight, out));
  const NormArgs args{.x = AsRows(x),
                      .residual = {},
                      .out = AsRows(out),
                      .weight = weight.data,
                      .eps = eps,
                      .pdl = options_.pdl_decode_kernels};
  return Launched("RmsNorm", LaunchRmsNorm(args, stream_));
}

absl::Status CudaBackend::AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                     float eps, const Tensor& out) {
  constexpr const char* kOp = "AddRmsNorm";
  RETURN_IF_ERROR(CheckNormArgs(kOp, x, weight, out));
  RETURN_IF_ERROR(ExpectCuda(kOp, "residual", residual));
  RETURN_IF_ERROR(ExpectDType(kOp, "residual", residual, DType::kBF16));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "residual", residual));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, residual));
  NormArgs args{.x = AsRows(x),
                .residual = AsRows(residual),
                .out = AsRows(out),
                .weight = weight.data,
                .eps = eps,
                .pdl = options_.pdl_decode_kernels};
  return Launched(kOp, LaunchRmsNorm(args, stream_));
}

absl::Status CudaBackend::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    float eps, const Tensor& out) {
  constexpr const char* kOp = "LayerNorm";
  RETURN_IF_ERROR(CheckNormArgs(kOp, x, weight, out));
  RETURN_IF_ERROR(ExpectCuda(kOp, "bias", bias));
  RETURN_IF_ERROR(ExpectDType(kOp, "bias", bias, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(kOp, "bias", bias, 1));
  RETURN_IF_ERROR(ExpectDim(kOp, "bias", bias, 0, x.dim(-1)));
  NormArgs args{
      .x = AsRows(x), .residual = {}, .out = AsRows(out), .weight = weight.data, .bias = bias.data,
      .eps = eps};
  return Launched(kOp, LaunchLayerNorm(args, stream_));
}

}  // namespace xserv::kernels::cuda
