// CudaBackend mixture-of-experts ops: router top-k (softmax.cu) and sparse dense-bf16 experts
// (moe.cu). MXFP4 experts are not implemented on the device yet; the model loader dequantises
// them to dense at load, which is what reaches this op today.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/op_util.h"
#include "kernels/cuda/softmax.h"

namespace xserv::kernels::cuda {

absl::Status CudaBackend::RouterTopK(const Tensor& logits, const Tensor& ids,
                                     const Tensor& weights) {
  constexpr const char* kOp = "RouterTopK";
  RETURN_IF_ERROR(ExpectCuda(kOp, "logits", logits));
  RETURN_IF_ERROR(ExpectDType(kOp, "logits", logits, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "logits", logits, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "logits", logits));
  RETURN_IF_ERROR(ExpectCuda(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectDType(kOp, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "ids", ids, 2));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectCuda(kOp, "weights", weights));
  RETURN_IF_ERROR(ExpectDType(kOp, "weights", weights, DType::kF32));
  RETURN_IF_ERROR(ExpectSameShape(kOp, ids, weights));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "weights", weights));
  RETURN_IF_ERROR(ExpectDim(kOp, "ids", ids, 0, logits.dim(0)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", logits.dim(0)));
  const int64_t experts = logits.dim(1), k = ids.dim(1);
  if (k < 1 || k > experts || experts > kMaxRouterExperts) {
    return OpError(kOp, absl::StrCat("top-k ", k, " of ", experts, " experts (supported: up to ",
                                     kMaxRouterExperts, " experts)"));
  }
  return Launched(kOp, LaunchRouterTopK(AsRows(logits), static_cast<int>(k), ids.as<int32_t>(),
                                        weights.as<float>(), stream_));
}

absl::Status CudaBackend::Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  const ExpertWeights& experts, const GluParams& glu,
                                  const Tensor& out) {
  constexpr const char* kOp = "Experts";
  if (experts.format != ExpertWeights::Format::kDense) {
    return absl::UnimplementedError(
        "Experts: MXFP4 experts are not implemented on CUDA yet (dequantise at load)");
  }
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectCuda(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kBF16));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  if (x.data == out.data) return OpError(kOp, "out must not alias x");
  RETURN_IF_ERROR(ExpectCuda(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectDType(kOp, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "ids", ids, 2));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectCuda(kOp, "weights", weights));
  RETURN_IF_ERROR(ExpectDType(kOp, "weights", weights, DType::kF32));
  RETURN_IF_ERROR(ExpectSameShape(kOp, ids, weights));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "weights", weights));
  RETURN_IF_ERROR(ExpectDim(kOp, "ids", ids, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", x.dim(0)));
  const Tensor& gu = experts.gate_up;
  const Tensor& dn = experts.down;
  for (const Tensor* t : {&gu, &dn, &experts.gate_up_bias, &experts.down_bias}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "expert weight", *t));
    RETURN_IF_ERROR(ExpectDType(kOp, "expert weight", *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectContiguous(kOp, "expert weight", *t));
  }
  RETURN_IF_ERROR(ExpectRank(kOp, "gate_up", gu, 3));
  RETURN_IF_ERROR(ExpectRank(kOp, "down", dn, 3));
  RETURN_IF_ERROR(ExpectRank(kOp, "gate_up_bias", experts.gate_up_bias, 2));
  RETURN_IF_ERROR(ExpectRank(kOp, "down_bias", experts.down_bias, 2));
  const int64_t num_experts = gu.dim(0), two_i = gu.dim(1), hidden = x.dim(1);
  const int64_t inter = two_i / 2;
  if (two_i % 2 != 0) return OpError(kOp, "gate_up rows must be even (gate/up interleaved)");
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up", gu, 2, hidden));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 1, hidden));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 2, inter));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 1, two_i));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 1, hidden));
  if (ids.dim(1) < 1) return OpError(kOp, "top-k must be positive");
  if (ExpertsSharedBytes(hidden, inter) > kMaxExpertsSharedBytes) {
    return OpError(kOp, absl::StrCat("hidden ", hidden, " and intermediate ", inter,
                                     " exceed the kernel's shared memory"));
  }
  RETURN_IF_ERROR(CheckIndices(kOp, "expert id", ids, num_experts));
  const ExpertsArgs args{.x = AsRows(x),
                         .out = AsRows(out),
                         .ids = ids.as<int32_t>(),
                         .weights = weights.as<float>(),
                         .k = static_cast<int>(ids.dim(1)),
                         .gate_up = gu.data,
                         .gate_up_bias = experts.gate_up_bias.data,
                         .down = dn.data,
                         .down_bias = experts.down_bias.data,
                         .experts = static_cast<int>(num_experts),
                         .hidden = static_cast<int>(hidden),
                         .inter = static_cast<int>(inter),
                         .limit = glu.limit,
                         .alpha = glu.alpha};
  return Launched(kOp, LaunchExperts(args, stream_));
}

}  // namespace xserv::kernels::cuda
