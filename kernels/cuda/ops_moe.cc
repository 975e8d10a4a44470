// CudaBackend mixture-of-experts ops: router top-k (softmax.cu), sparse dense-bf16 experts
// (moe.cu) and MXFP4 or FP8 experts on tensor cores (moe_quantized.cu).
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_quantized.h"
#include "kernels/cuda/op_util.h"
#include "kernels/cuda/softmax.h"

namespace xserv::kernels::cuda {

namespace {

static_assert(kMoeFp8Block == kFp8ExpertBlock);

// Tokens per round of the quantised path: bounds its scratch (f32 down outputs of k pairs per
// token).
constexpr int64_t kQuantizedChunkTokens = 1024;

// A routing of `tokens` rows: ids i32 and weights f32 [tokens, k], contiguous.
absl::Status CheckRouting(const char* op, const Tensor& ids, const Tensor& weights,
                          int64_t tokens) {
  RETURN_IF_ERROR(ExpectCuda(op, "ids", ids));
  RETURN_IF_ERROR(ExpectDType(op, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(op, "ids", ids, 2));
  RETURN_IF_ERROR(ExpectContiguous(op, "ids", ids));
  RETURN_IF_ERROR(ExpectCuda(op, "weights", weights));
  RETURN_IF_ERROR(ExpectDType(op, "weights", weights, DType::kF32));
  RETURN_IF_ERROR(ExpectSameShape(op, ids, weights));
  RETURN_IF_ERROR(ExpectContiguous(op, "weights", weights));
  RETURN_IF_ERROR(ExpectDim(op, "ids", ids, 0, tokens));
  return ExpectIntRange(op, "tokens", tokens);
}

// The activations and routing of an Experts call (both weight formats): bf16 rows x and out of
// one shape, not aliased; ids i32 and weights f32 [tokens, k].
absl::Status CheckExpertsActivations(const char* op, const Tensor& x, const Tensor& ids,
                                     const Tensor& weights, const Tensor& out) {
  RETURN_IF_ERROR(ExpectCuda(op, "x", x));
  RETURN_IF_ERROR(ExpectDType(op, "x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(op, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "x", x));
  RETURN_IF_ERROR(ExpectCuda(op, "out", out));
  RETURN_IF_ERROR(ExpectDType(op, "out", out, DType::kBF16));
  RETURN_IF_ERROR(ExpectSameShape(op, x, out));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  if (x.data == out.data) return OpError(op, "out must not alias x");
  return CheckRouting(op, ids, weights, x.dim(0));
}

}  // namespace

absl::Status CudaBackend::RouterTopK(const Tensor& logits, const Tensor& ids,
                                     const Tensor& weights) {
  constexpr const char* kOp = "RouterTopK";
  RETURN_IF_ERROR(ExpectCuda(kOp, "logits", logits));
  RETURN_IF_ERROR(ExpectDType(kOp, "logits", logits, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "logits", logits, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "logits", logits));
  RETURN_IF_ERROR(CheckRouting(kOp, ids, weights, logits.dim(0)));
  const int64_t experts = logits.dim(1), k = ids.dim(1);
  if (k < 1 || k > experts || experts > kMaxRouterExperts) {
    return OpError(kOp, absl::StrCat("top-k ", k, " of ", experts, " experts (supported: up to ",
                                     kMaxRouterExperts, " experts)"));
  }
  return Launched(kOp, LaunchRouterTopK(AsRows(logits), static_cast<int>(k), ids.as<int32_t>(),
                                        weights.as<float>(), stream_,
                                        options_.pdl_decode_kernels));
}

absl::Status CudaBackend::Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  const ExpertWeights& experts, const GluParams& glu,
                                  const Tensor& out) {
  constexpr const char* kOp = "Experts";
  if (experts.format != ExpertWeights::Format::kDense) {
    return ExpertsQuantized(x, ids, weights, experts, glu, out);
  }
  RETURN_IF_ERROR(CheckExpertsActivations(kOp, x, ids, weights, out));
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

absl::Status CudaBackend::ExpertsAddRmsNorm(const Tensor& x, const Tensor& ids,
                                            const Tensor& weights, const ExpertWeights& experts,
                                            const GluParams& glu, const Tensor& out,
                                            const Tensor& residual, const Tensor& norm_weight,
                                            float eps, const Tensor& normed) {
  constexpr const char* kOp = "ExpertsAddRmsNorm";
  if (options_.fuse_moe_norm && experts.format != ExpertWeights::Format::kDense) {
    // The norm's operands as AddRmsNorm(out, residual, norm_weight, normed) checks them.
    RETURN_IF_ERROR(ExpectAddRmsNormOperands(kOp, out, residual, norm_weight, normed));
    const NormArgs probe{.x = {.data = nullptr, .rows = out.dim(0), .cols = out.dim(-1)},
                         .residual = AsRows(residual),
                         .out = AsRows(normed),
                         .weight = norm_weight.data,
                         .eps = eps};
    if (RmsNormTakesCombine(probe)) {
      const MoeNorm norm{.residual = residual, .weight = norm_weight, .normed = normed, .eps = eps};
      return ExpertsQuantized(x, ids, weights, experts, glu, out, &norm);
    }
  }
  return Backend::ExpertsAddRmsNorm(x, ids, weights, experts, glu, out, residual, norm_weight, eps,
                                    normed);
}

namespace {

// The expert matrix `what` [E, rows, in] as `format` stores it (ExpertWeights): u8 codes (MXFP4
// [E, rows, in/32, 16]; FP8 [E, rows, in]) and scales (MXFP4 u8 [E, rows, in/32]; FP8 f32
// [E, ceil(rows/128), ceil(in/128)]), contiguous, the codes 16-byte aligned (streamed with
// 16-byte loads).
absl::Status CheckQuantizedMatrix(const char* op, const char* what, ExpertWeights::Format format,
                                  const Tensor& codes, const Tensor& scales, int64_t experts,
                                  int64_t rows, int64_t in) {
  const bool fp8 = format == ExpertWeights::Format::kFp8;
  RETURN_IF_ERROR(ExpectCuda(op, what, codes));
  RETURN_IF_ERROR(ExpectDType(op, what, codes, DType::kU8));
  RETURN_IF_ERROR(ExpectContiguous(op, what, codes));
  RETURN_IF_ERROR(ExpectCuda(op, what, scales));
  RETURN_IF_ERROR(ExpectDType(op, what, scales, fp8 ? DType::kF32 : DType::kU8));
  RETURN_IF_ERROR(ExpectContiguous(op, what, scales));
  if (reinterpret_cast<uintptr_t>(codes.data) % 16 != 0) {
    return OpError(op, absl::StrCat(what, " codes must be 16-byte aligned"));
  }
  const std::vector<int64_t> code_dims = fp8 ? std::vector<int64_t>{experts, rows, in}
                                             : std::vector<int64_t>{experts, rows, in / 32, 16};
  const int64_t block = kMoeFp8Block;
  const std::vector<int64_t> scale_dims =
      fp8 ? std::vector<int64_t>{experts, (rows + block - 1) / block, (in + block - 1) / block}
          : std::vector<int64_t>{experts, rows, in / 32};
  RETURN_IF_ERROR(ExpectRank(op, what, codes, static_cast<int64_t>(code_dims.size())));
  RETURN_IF_ERROR(ExpectRank(op, what, scales, 3));
  for (size_t d = 0; d < code_dims.size(); ++d) {
    RETURN_IF_ERROR(ExpectDim(op, what, codes, static_cast<int>(d), code_dims[d]));
  }
  for (size_t d = 0; d < scale_dims.size(); ++d) {
    RETURN_IF_ERROR(ExpectDim(op, what, scales, static_cast<int>(d), scale_dims[d]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaBackend::ExpertsQuantized(const Tensor& x, const Tensor& ids,
                                           const Tensor& weights, const ExpertWeights& experts,
                                           const GluParams& glu, const Tensor& out,
                                           const MoeNorm* norm) {
  constexpr const char* kOp = "Experts";
  RETURN_IF_ERROR(CheckExpertsActivations(kOp, x, ids, weights, out));
  const bool fp8 = experts.format == ExpertWeights::Format::kFp8;
  const char* format_name = fp8 ? "FP8" : "MXFP4";
  const Tensor& gub = experts.gate_up_blocks;
  const Tensor& dnb = experts.down_blocks;
  for (const Tensor* t : {&experts.gate_up_bias, &experts.down_bias}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "expert bias", *t));
    RETURN_IF_ERROR(ExpectDType(kOp, "expert bias", *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectContiguous(kOp, "expert bias", *t));
  }
  RETURN_IF_ERROR(ExpectCuda(kOp, "gate_up_blocks", gub));
  if (gub.rank < 2) return OpError(kOp, "gate_up_blocks must be [E, rows, ...]");
  const int64_t num_experts = gub.dim(0), two_i = gub.dim(1), hidden = x.dim(1);
  const int64_t inter = two_i / 2;
  if (two_i % 2 != 0) return OpError(kOp, "gate_up rows must be even (gate/up interleaved)");
  if (hidden % 32 != 0 || inter % 32 != 0) {
    return OpError(kOp, absl::StrCat("hidden and intermediate sizes must be multiples of 32 (",
                                     format_name, " groups)"));
  }
  // Each A row is staged with 16-byte loads.
  if (x.stride(0) % 8 != 0 || reinterpret_cast<uintptr_t>(x.data) % 16 != 0) {
    return OpError(kOp, "x rows must be 16-byte aligned");
  }
  // The combine writes 4 outputs of a row at once.
  if (out.stride(0) % 4 != 0 || reinterpret_cast<uintptr_t>(out.data) % 8 != 0) {
    return OpError(kOp, "out rows must be 8-byte aligned");
  }
  RETURN_IF_ERROR(CheckQuantizedMatrix(kOp, "gate_up", experts.format, gub,
                                       experts.gate_up_scales, num_experts, two_i, hidden));
  RETURN_IF_ERROR(CheckQuantizedMatrix(kOp, "down", experts.format, dnb, experts.down_scales,
                                       num_experts, hidden, inter));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 1, two_i));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 1, hidden));
  const int64_t k = ids.dim(1);
  if (k < 1) return OpError(kOp, "top-k must be positive");
  if (num_experts > kMoeMaxExperts) {
    return OpError(kOp,
                   absl::StrCat(num_experts, " experts (supported: up to ", kMoeMaxExperts, ")"));
  }
  RETURN_IF_ERROR(ExpectIntRange(kOp, "hidden size", hidden));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "gate_up rows", two_i));
  // The GEMV stages one input row in shared memory (the GEMM's tiles are fixed); the batch-
  // invariant mode never runs the GEMV but keeps the same limit, about 90k features.
  if (MoeGemvSharedBytes(std::max(hidden, inter)) > kMaxExpertsSharedBytes) {
    return OpError(kOp, absl::StrCat("hidden ", hidden, " and intermediate ", inter,
                                     " exceed the kernel's shared memory"));
  }
  RETURN_IF_ERROR(CheckIndices(kOp, "expert id", ids, num_experts));
  const int64_t tokens = x.dim(0);
  if (tokens == 0) return absl::OkStatus();

  // Scratch for one round: routing (sorted pairs, block experts, block count), activations,
  // down outputs.
  const int64_t chunk = std::min(tokens, kQuantizedChunkTokens);
  const int64_t routing_ints = MoeRoutingIntsFor(chunk * k, num_experts);
  RETURN_IF_ERROR(Reserve(moe_routing_, static_cast<size_t>(routing_ints) * sizeof(int32_t)));
  RETURN_IF_ERROR(Reserve(moe_act_, static_cast<size_t>(chunk * k * inter) * 2));
  RETURN_IF_ERROR(Reserve(moe_out_, static_cast<size_t>(chunk * k * hidden) * sizeof(float)));
  // Few tokens (decode): the GEMV form, no alignment (moe_quantized.h says why and when).
  const bool gemv = !options_.batch_invariant && tokens <= kMoeGemvMaxTokens;
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, tokens - t0);
    NormArgs fused_norm;
    if (norm != nullptr) {
      fused_norm = NormArgs{.residual = AsRows(norm->residual.SliceRows(t0, t0 + n)),
                            .out = AsRows(norm->normed.SliceRows(t0, t0 + n)),
                            .weight = norm->weight.data,
                            .eps = norm->eps};
    }
    const MoeLayerArgs layer{.x = AsRows(x.SliceRows(t0, t0 + n)),
                             .ids = ids.as<int32_t>() + t0 * k,
                             .weights = weights.as<float>() + t0 * k,
                             .top_k = static_cast<int>(k),
                             .experts = static_cast<int>(num_experts),
                             .hidden = static_cast<int>(hidden),
                             .inter = static_cast<int>(inter),
                             .format = fp8 ? MoeWeightFormat::kFp8 : MoeWeightFormat::kMxfp4,
                             .gate_up_blocks = gub.as<uint8_t>(),
                             .gate_up_scales = experts.gate_up_scales.data,
                             .gate_up_bias = experts.gate_up_bias.data,
                             .down_blocks = dnb.as<uint8_t>(),
                             .down_scales = experts.down_scales.data,
                             .down_bias = experts.down_bias.data,
                             .limit = glu.limit,
                             .alpha = glu.alpha,
                             .routing = static_cast<int32_t*>(moe_routing_.view().data),
                             .act = moe_act_.view().data,
                             .y = static_cast<float*>(moe_out_.view().data),
                             .out = AsRows(out.SliceRows(t0, t0 + n)),
                             .pdl = options_.pdl_decode_kernels,
                             .norm = fused_norm};
    RETURN_IF_ERROR(Launched(kOp, LaunchMoeLayer(layer, gemv, stream_)));
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cuda
