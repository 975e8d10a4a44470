// CudaBackend normalisation ops: validation, then one launch each (norm.cu).
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/op_util.h"

namespace xserv::kernels::cuda {

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                  const Tensor& out) {
  RETURN_IF_ERROR(ExpectNormOperands("RmsNorm", x, weight, out));
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
  RETURN_IF_ERROR(ExpectAddRmsNormOperands(kOp, x, residual, weight, out));
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
  RETURN_IF_ERROR(ExpectNormOperands(kOp, x, weight, out));
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
