// CudaBackend::Matmul: validation, then one cuBLASLt GEMM through the plan cache (gemm.h).
// MatmulFp8: FP8 block-scaled weights through the skinny GEMV (decode) or decoded to bf16 scratch
// and the same GEMM.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_dequant.h"
#include "kernels/cuda/fp8_gemv_mma.h"
#include "kernels/cuda/gated_mlp_gemv.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/l2_prefetch.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/op_util.h"
#include "spdlog/spdlog.h"

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

// x bf16 [M, K] rows, out bf16 or f32 [M, n], bias bf16 or f32 [n] or null (Matmul, MatmulFp8);
// fills the call's x / out / bias fields.
absl::Status CheckMatmulIo(const char* op, const Tensor& x, int64_t n, const Tensor* bias,
                           const Tensor& out, GemmCall& call) {
  RETURN_IF_ERROR(ExpectCuda(op, "x", x));
  RETURN_IF_ERROR(ExpectDType(op, "x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(op, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "x", x));
  RETURN_IF_ERROR(ExpectCuda(op, "out", out));
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) {
    return OpError(op, absl::StrCat("out must be bf16 or f32, got ", out.Describe()));
  }
  RETURN_IF_ERROR(ExpectRank(op, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  RETURN_IF_ERROR(ExpectDim(op, "out", out, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectDim(op, "out", out, 1, n));
  if (x.dim(1) < 1) return OpError(op, "inner dimension must be positive");
  ASSIGN_OR_RETURN(call.ldx, LeadingDim(op, "x", x));
  ASSIGN_OR_RETURN(call.ldo, LeadingDim(op, "out", out));
  call.x = x.data;
  call.out = out.data;
  call.out_type = *ElemTypeOf(out.dtype);
  call.m = x.dim(0);
  call.n = n;
  call.k = x.dim(1);
  if (bias != nullptr) {
    RETURN_IF_ERROR(ExpectCuda(op, "bias", *bias));
    RETURN_IF_ERROR(ExpectRank(op, "bias", *bias, 1));
    RETURN_IF_ERROR(ExpectDim(op, "bias", *bias, 0, n));
    if (bias->dtype != DType::kBF16 && bias->dtype != DType::kF32) {
      return OpError(op, absl::StrCat("bias must be bf16 or f32, got ", bias->Describe()));
    }
    call.bias = bias->data;
    call.bias_type = *ElemTypeOf(bias->dtype);
  }
  return absl::OkStatus();
}

// out = x · w^T (+ bias) with a bf16 weight: the checks of Matmul and MatmulSiluMul, and `call`
// filled from them.
absl::Status CheckDenseMatmul(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias,
                              const Tensor& out, GemmCall& call) {
  RETURN_IF_ERROR(ExpectCuda(op, "w", w));
  RETURN_IF_ERROR(ExpectDType(op, "w", w, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(op, "w", w, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "w", w));
  RETURN_IF_ERROR(CheckMatmulIo(op, x, w.dim(0), bias, out, call));
  RETURN_IF_ERROR(ExpectDim(op, "w", w, 1, x.dim(1)));
  call.w = w.data;
  ASSIGN_OR_RETURN(call.ldw, LeadingDim(op, "w", w));
  return absl::OkStatus();
}

// out = x · w^T (+ bias) with an FP8 weight: the checks of MatmulFp8 and AddRmsNormMatmul, and
// `call` filled from them (its w left to the caller).
absl::Status CheckFp8Matmul(const char* op, const Tensor& x, const Fp8Weight& w,
                            const Tensor* bias, const Tensor& out, GemmCall& call) {
  RETURN_IF_ERROR(ExpectCuda(op, "FP8 codes", w.codes));
  RETURN_IF_ERROR(ExpectCuda(op, "FP8 scales", w.scales));
  RETURN_IF_ERROR(ExpectRank(op, "FP8 codes", w.codes, 2));
  RETURN_IF_ERROR(CheckMatmulIo(op, x, w.codes.dim(0), bias, out, call));
  RETURN_IF_ERROR(ExpectFp8Weight(op, w.codes, w.scales, w.block, x.dim(1)));
  if (w.row_scales.data == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ExpectCuda(op, "FP8 row scales", w.row_scales));
  RETURN_IF_ERROR(ExpectDType(op, "FP8 row scales", w.row_scales, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor(op, "FP8 row scales", w.row_scales));
  if (w.row_scales.rank != 2 ||
      w.row_scales.dim(0) != (w.codes.dim(1) + w.block - 1) / w.block ||
      w.row_scales.dim(1) != w.codes.dim(0)) {
    return OpError(op, "FP8 row scales must be [ceil(K / block), N]");
  }
  return absl::OkStatus();
}

// Whether MatmulFp8 runs `call` as W8A8 when it has more rows than the GEMV takes: 128-blocks,
// k / 128 a multiple of 4, n of 16, a bf16 or f32 output (an FP8 lm_head's logits) with 16-byte
// aligned rows (fp8_w8a8, not batch-invariant).
bool W8A8TakesShape(const CudaBackendOptions& options, int64_t n, int64_t k, int64_t block) {
  return options.fp8_w8a8 && !options.batch_invariant && block == 128 && k % 128 == 0 &&
         (k / 128) % 4 == 0 && n % 16 == 0;
}
bool TakesW8A8(const CudaBackendOptions& options, const GemmCall& call, const Fp8Weight& w) {
  const bool out_type = call.out_type == ElemType::kBF16 || call.out_type == ElemType::kF32;
  const int64_t row_align = call.out_type == ElemType::kF32 ? 4 : 8;
  return W8A8TakesShape(options, call.n, call.k, w.block) && out_type &&
         call.ldo % row_align == 0;
}

// Whether the byte ranges of two row-major rank-2 tensors intersect.
bool Overlap(const Tensor& a, const Tensor& b) {
  const auto range = [](const Tensor& t) {
    const char* begin = static_cast<const char*>(t.data);
    const int64_t elems = t.dim(0) == 0 ? 0 : (t.dim(0) - 1) * t.stride(0) + t.dim(1);
    return std::pair{begin, begin + elems * static_cast<int64_t>(DTypeSize(t.dtype))};
  };
  const auto [a0, a1] = range(a);
  const auto [b0, b1] = range(b);
  return a0 < b1 && b0 < a1;
}

// A block's pre-norm ahead of a projection into `out` (AddRmsNormMatmul, GatedMlpRowFp8): its
// operands, and that what the fused kernels write overlaps neither what every CTA reads (x,
// residual) nor each other. `out_may_alias_input`: out is written only once every CTA has read x
// and residual (GatedMlpRowFp8's last CTA), so it may be either of them.
absl::Status CheckPreNorm(const char* op, const PreNorm& p, const Tensor& out,
                          bool out_may_alias_input = false) {
  RETURN_IF_ERROR(ExpectAddRmsNormOperands(op, p.x, p.residual, p.weight, p.normed));
  RETURN_IF_ERROR(ExpectRank(op, "x", p.x, 2));
  RETURN_IF_ERROR(ExpectCuda(op, "residual_out", p.residual_out));
  RETURN_IF_ERROR(ExpectDType(op, "residual_out", p.residual_out, DType::kBF16));
  RETURN_IF_ERROR(ExpectRowMajor(op, "residual_out", p.residual_out));
  RETURN_IF_ERROR(ExpectSameShape(op, p.x, p.residual_out));
  for (const Tensor* in : {&p.x, &p.residual}) {
    for (const Tensor* written : {&p.residual_out, &p.normed, &out}) {
      if (written == &out && out_may_alias_input) continue;
      if (Overlap(*in, *written)) {
        return OpError(op, "residual_out, normed and out must not overlap x or residual");
      }
    }
  }
  if (Overlap(p.residual_out, p.normed) || Overlap(p.residual_out, out) ||
      Overlap(p.normed, out)) {
    return OpError(op, "residual_out, normed and out must not overlap each other");
  }
  return absl::OkStatus();
}

}  // namespace

CudaBackend::Fp8DecodeGemv CudaBackend::Fp8DecodeGemvFor(const GemmCall& call,
                                                         const Fp8Weight& w) const {
  // Decode rows stream the FP8 weights once, whatever CudaBackendOptions::gemv says (that option
  // weighs the bf16 GEMV against cuBLASLt; here the alternative is decoding the whole weight).
  // Not in the batch-invariant mode, whose rows must not depend on the batch size that picks a
  // kernel.
  Fp8DecodeGemv d;
  if (options_.batch_invariant || call.m > kGemvMaxRows || call.n > INT32_MAX ||
      call.k > INT32_MAX) {
    return d;
  }
  d.args = GemvArgsFrom(call, options_.pdl);
  d.args.w = w.codes.data;
  d.args.ldw = call.k;
  d.args.scales = w.scales.as<float>();
  d.args.scale_cols = w.scales.dim(1);
  d.args.block = static_cast<int>(w.block);
  const bool cuda_cores = GemvSupports(d.args);
  // The tensor-core form from fp8_gemv_mma_min_rows rows, and wherever x is too large for the
  // CUDA-core GEMV's shared memory (rather than decoding the whole weight).
  if (options_.fp8_gemv_mma && (call.m >= options_.fp8_gemv_mma_min_rows || !cuda_cores) &&
      Fp8MmaGemvSupports(d.args)) {
    d.kernel = Fp8DecodeGemv::kTensorCores;
  } else if (cuda_cores) {
    d.kernel = Fp8DecodeGemv::kCudaCores;
  }
  return d;
}

bool CudaBackend::Fp8MatmulAtAnyRows(int64_t n, int64_t k, int64_t block) const {
  return W8A8TakesShape(options_, n, k, block);
}

void CudaBackend::PrefetchAfterNextMatmul(const Tensor& weight) {
  pending_l2_prefetch_ = {};
  if (options_.l2_prefetch_bytes <= 0 || options_.l2_prefetch_own ||
      weight.device != DeviceType::kCuda || weight.rank != 2 || weight.stride(1) != 1) {
    return;
  }
  const auto elem = static_cast<int64_t>(DTypeSize(weight.dtype));
  pending_l2_prefetch_ = L2PrefetchFor(weight.data, weight.stride(0) * elem, weight.dim(0),
                                       weight.dim(1) * elem, options_.l2_prefetch_bytes);
}

absl::Status CudaBackend::Matmul(const Tensor& x, const Tensor& w, const Tensor* bias,
                                 const Tensor& out) {
  constexpr const char* kOp = "Matmul";
  GemmCall call;
  TakeL2Prefetch(call);
  RETURN_IF_ERROR(CheckDenseMatmul(kOp, x, w, bias, out, call));
  RETURN_IF_ERROR(gemm_->Run(call, stream_));
  return LaunchedWeights(kOp, cudaGetLastError(), call.n, call.k,
                         static_cast<double>(call.n * call.k) * 2);
}

absl::Status CudaBackend::MatmulSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                        const Tensor& act) {
  constexpr const char* kOp = "MatmulSiluMul";
  const bool one_row = x.rank == 2 && x.dim(0) == 1;
  if (!options_.fuse_silu_gemv || !options_.gemv || options_.batch_invariant || !one_row) {
    return Backend::MatmulSiluMul(x, w, gate_up, act);  // its Matmul takes the hint
  }
  GemmCall call;
  TakeL2Prefetch(call);
  RETURN_IF_ERROR(CheckDenseMatmul(kOp, x, w, nullptr, gate_up, call));
  if (call.n % 2 != 0) return OpError(kOp, "w must stack gate and up rows (an even count)");
  RETURN_IF_ERROR(ExpectCuda(kOp, "act", act));
  RETURN_IF_ERROR(ExpectDType(kOp, "act", act, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(kOp, "act", act, 2));
  RETURN_IF_ERROR(ExpectDim(kOp, "act", act, 0, 1));
  RETURN_IF_ERROR(ExpectDim(kOp, "act", act, 1, call.n / 2));
  ASSIGN_OR_RETURN(call.ldo, LeadingDim(kOp, "act", act));
  call.out = act.data;  // gate_up itself is never written
  const std::optional<GemvArgs> gemv = GemvArgsOf(call, options_.pdl, /*glu=*/true);
  if (!gemv) {
    pending_l2_prefetch_ = call.prefetch;  // for the default's Matmul
    return Backend::MatmulSiluMul(x, w, gate_up, act);
  }
  return LaunchedWeights(kOp, LaunchGemv(*gemv, stream_), call.n, call.k,
                         static_cast<double>(call.n * call.k) * 2);
}

absl::Status CudaBackend::MatmulFp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias,
                                    const Tensor& out) {
  constexpr const char* kOp = "MatmulFp8";
  GemmCall call;
  TakeL2Prefetch(call);
  RETURN_IF_ERROR(CheckFp8Matmul(kOp, x, w, bias, out, call));
  const int64_t n = call.n, k = call.k;
  if (call.m == 0 || n == 0) return absl::OkStatus();
  // Decode rows: stream the FP8 weights once (half the bytes of bf16).
  const Fp8DecodeGemv decode = Fp8DecodeGemvFor(call, w);
  if (decode.kernel == Fp8DecodeGemv::kCudaCores) {
    return LaunchedWeights(kOp, LaunchGemv(decode.args, stream_), n, k,
                           static_cast<double>(n * k));
  }
  if (decode.kernel == Fp8DecodeGemv::kTensorCores) {
    return LaunchedWeights(kOp, LaunchFp8MmaGemv(decode.args, stream_), n, k,
                           static_cast<double>(n * k));
  }
  if (TakesW8A8(options_, call, w)) {
    const absl::Status w8a8 = MatmulW8A8(call, w);
    if (w8a8.ok()) return w8a8;
    if (!absl::IsUnimplemented(w8a8)) return w8a8;
    if (!fp8_w8a8_refused_) {
      fp8_w8a8_refused_ = true;
      spdlog::warn("{}; decoding FP8 weights to bf16 for such shapes", std::string(w8a8.message()));
    }
  }
  // Otherwise the weight decoded into bf16 scratch, then the bf16 GEMM: 5 bytes of traffic per
  // weight against 2 for weights decoded at load, so bandwidth-bound steps of more than 8 rows
  // are slower than BF16 until a W8A16 tensor-core GEMM exists (why --fp8-matmuls is opt-in).
  RETURN_IF_ERROR(Reserve(fp8_weight_, static_cast<size_t>(n * k) * 2));
  RETURN_IF_ERROR(Launched(
      "DequantizeFp8", LaunchDequantizeFp8(w.codes.as<uint8_t>(), w.scales.as<float>(), n, k,
                                           w.scales.dim(1), w.block, fp8_weight_.view().data,
                                           stream_)));
  call.w = fp8_weight_.view().data;
  call.ldw = k;
  call.w_from_stream = true;
  RETURN_IF_ERROR(gemm_->Run(call, stream_));
  return LaunchedWeights(kOp, cudaGetLastError(), n, k, static_cast<double>(n * k) * 2);
}

absl::Status CudaBackend::SiluMulMatmulFp8(const Tensor& gate, const Tensor& up,
                                           const Tensor& act, const Fp8Weight& w,
                                           const Tensor& out) {
  constexpr const char* kOp = "SiluMulMatmulFp8";
  GemmCall call;
  if (!options_.fuse_silu_quant) return Backend::SiluMulMatmulFp8(gate, up, act, w, out);
  // Everything checked before the first launch: no half-done op on bad input.
  for (const Tensor* t : {&gate, &up, &act}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "operand", *t));
    RETURN_IF_ERROR(ExpectDType(kOp, "operand", *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectRank(kOp, "operand", *t, 2));
    RETURN_IF_ERROR(ExpectRowMajor(kOp, "operand", *t));
    RETURN_IF_ERROR(ExpectSameShape(kOp, act, *t));
  }
  RETURN_IF_ERROR(CheckFp8Matmul(kOp, act, w, nullptr, out, call));
  // Fused only where MatmulFp8 would quantise act: not for its decode GEMVs, which read act.
  if (Fp8DecodeGemvFor(call, w).kernel != Fp8DecodeGemv::kNone ||
      !TakesW8A8(options_, call, w)) {
    return Backend::SiluMulMatmulFp8(gate, up, act, w, out);
  }
  const RowsView g = AsRows(gate), u = AsRows(up), a = AsRows(act);
  const SiluMulRows rows{.gate = g.data, .ld_gate = g.stride, .up = u.data, .ld_up = u.stride,
                         .act = a.data, .ld_act = a.stride};
  TakeL2Prefetch(call);  // dropped: no decode GEMV runs here
  const absl::Status w8a8 = MatmulW8A8(call, w, nullptr, &rows);
  if (!absl::IsUnimplemented(w8a8)) return w8a8;
  return Backend::SiluMulMatmulFp8(gate, up, act, w, out);  // a refused shape: the two ops
}

bool CudaBackend::WantsFp8DownTransposed(int64_t hidden, int64_t inter, int64_t block) const {
  // The one-kernel form keeps a CTA per 32 intermediate columns resident, three per SM; it
  // measured faster than the three kernels with 384 such units on 132 SMs (Qwen3-8B) and slower
  // with 96 (a 1024 x 3072 MLP): it is taken from two units per SM.
  return !mlp_row_scratch_.empty() && !options_.batch_invariant && block == 128 &&
         hidden % 128 == 0 && hidden <= kMlpRowMaxHidden && inter % 128 == 0 &&
         inter / 32 >= 2 * int64_t{sm_count_};
}

absl::Status CudaBackend::GatedMlpRowFp8(const PreNorm* p, const Tensor& normed,
                                         const Fp8Weight& gate_up, const Fp8Weight& down_t,
                                         const Tensor& out) {
  constexpr const char* kOp = "GatedMlpRowFp8";
  pending_l2_prefetch_ = {};  // no GEMV here takes the hint
  const Tensor& x = p != nullptr ? p->normed : normed;
  // Everything checked before the launch: no half-done op on bad input.
  for (const auto& [name, t] : {std::pair{"x", &x}, std::pair{"out", &out}}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, name, *t));
    RETURN_IF_ERROR(ExpectDType(kOp, name, *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectRank(kOp, name, *t, 2));
    RETURN_IF_ERROR(ExpectContiguous(kOp, name, *t));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  const int64_t hidden = x.dim(1), inter = down_t.codes.dim(0);
  for (const Fp8Weight* w : {&gate_up, &down_t}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "FP8 codes", w->codes));
    RETURN_IF_ERROR(ExpectCuda(kOp, "FP8 scales", w->scales));
    RETURN_IF_ERROR(ExpectFp8Weight(kOp, w->codes, w->scales, w->block, hidden));
  }
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up codes", gate_up.codes, 0, 2 * inter));
  // out is written by the last CTA, after every CTA has read x (and the pre-norm's inputs): the
  // models pass the attention block's output as the pre-norm's x and the MLP's out alike.
  if (p != nullptr) RETURN_IF_ERROR(CheckPreNorm(kOp, *p, out, /*out_may_alias_input=*/true));
  if (x.dim(0) != 1 || mlp_row_scratch_.empty() || options_.batch_invariant ||
      hidden > kMlpRowMaxHidden || gate_up.block != down_t.block) {
    return absl::UnimplementedError("GatedMlpRowFp8: one row, fused_mlp_row");
  }
  auto* scratch = static_cast<float*>(mlp_row_scratch_.view().data);
  GatedMlpGemvArgs args{.x = x.data,
                        .gate_up = gate_up.codes.as<uint8_t>(),
                        .gate_up_scales = gate_up.scales.as<float>(),
                        .down_t = down_t.codes.as<uint8_t>(),
                        .down_t_scales = down_t.scales.as<float>(),
                        .block = static_cast<int>(down_t.block),
                        .hidden = static_cast<int>(hidden),
                        .inter = static_cast<int>(inter),
                        .out = out.data,
                        .accum = scratch,
                        .arrivals = reinterpret_cast<unsigned*>(scratch + kMlpRowMaxHidden),
                        .pdl = options_.pdl_decode_kernels};
  if (p != nullptr) {
    const RowsView residual = AsRows(p->residual), residual_out = AsRows(p->residual_out),
                   normed_rows = AsRows(p->normed);
    args.x = p->x.data;
    args.norm = GemvNorm{.residual = residual.data,
                         .ld_residual = residual.stride,
                         .residual_out = residual_out.data,
                         .ld_residual_out = residual_out.stride,
                         .normed = normed_rows.data,
                         .ld_normed = normed_rows.stride,
                         .weight = p->weight.data,
                         .eps = p->eps};
  }
  if (!GatedMlpGemvSupports(args)) {
    return absl::UnimplementedError("GatedMlpRowFp8: a shape the one-kernel form does not take");
  }
  return LaunchedWeights(kOp, LaunchGatedMlpGemv(args, stream_), hidden, 3 * inter,
                         3.0 * static_cast<double>(inter * hidden));
}

absl::Status CudaBackend::AddRmsNormMatmul(const PreNorm& p, const MatmulWeight& w,
                                           const Tensor* bias, const Tensor& out) {
  constexpr const char* kOp = "AddRmsNormMatmul";
  GemmCall call;
  TakeL2Prefetch(call);  // the fused GEMV's, or handed back to the matmul op below
  if ((w.dense == nullptr) == (w.fp8 == nullptr)) {
    return OpError(kOp, "give exactly one of a dense and an FP8 weight");
  }
  RETURN_IF_ERROR(CheckPreNorm(kOp, p, out));
  // Everything checked before the first launch: no half-done op on bad input.
  if (w.dense != nullptr) {
    RETURN_IF_ERROR(CheckDenseMatmul(kOp, p.normed, *w.dense, bias, out, call));
  } else {
    RETURN_IF_ERROR(CheckFp8Matmul(kOp, p.normed, *w.fp8, bias, out, call));
  }
  // One row of FP8 weights only (gemv.h, GemvNorm, says why): the GEMV that MatmulFp8 would run
  // on normed, given the norm as its prologue.
  if (options_.fuse_norm_gemv && w.fp8 != nullptr && call.m == 1) {
    if (Fp8DecodeGemv decode = Fp8DecodeGemvFor(call, *w.fp8);
        decode.kernel == Fp8DecodeGemv::kCudaCores) {
      GemvArgs* gemv = &decode.args;
      const RowsView x = AsRows(p.x), residual = AsRows(p.residual),
                     residual_out = AsRows(p.residual_out), normed = AsRows(p.normed);
      gemv->x = x.data;
      gemv->ldx = x.stride;
      gemv->norm = GemvNorm{.residual = residual.data,
                            .ld_residual = residual.stride,
                            .residual_out = residual_out.data,
                            .ld_residual_out = residual_out.stride,
                            .normed = normed.data,
                            .ld_normed = normed.stride,
                            .weight = p.weight.data,
                            .eps = p.eps};
      if (GemvSupports(*gemv)) {
        return LaunchedWeights(kOp, LaunchGemv(*gemv, stream_), call.n, call.k,
                               static_cast<double>(call.n * call.k));
      }
    }
  }
  // Otherwise the norm kernel with the sum out of place, then the matmul: W8A8 with the norm
  // writing the activation codes too (fuse_norm_quant), or the plain matmul op.
  const NormArgs args{.x = AsRows(p.x),
                      .residual = AsRows(p.residual),
                      .residual_out = AsRows(p.residual_out),
                      .out = AsRows(p.normed),
                      .weight = p.weight.data,
                      .eps = p.eps,
                      .pdl = options_.pdl_decode_kernels};
  if (options_.fuse_norm_quant && w.fp8 != nullptr && call.m > kGemvMaxRows &&
      TakesW8A8(options_, call, *w.fp8) && RmsNormTakesFp8Codes(args)) {
    const absl::Status w8a8 = MatmulW8A8(call, *w.fp8, &args);
    if (!absl::IsUnimplemented(w8a8)) return w8a8;  // a refused shape runs the ops below
  }
  RETURN_IF_ERROR(Launched("AddRmsNorm", LaunchRmsNorm(args, stream_)));
  pending_l2_prefetch_ = call.prefetch;
  return w.dense != nullptr ? Matmul(p.normed, *w.dense, bias, out)
                            : MatmulFp8(p.normed, *w.fp8, bias, out);
}

absl::Status CudaBackend::MatmulW8A8(const GemmCall& call, const Fp8Weight& w,
                                     const NormArgs* norm, const SiluMulRows* silu) {
  constexpr const char* kOp = "MatmulFp8";
  const int64_t m = call.m, n = call.n, k = call.k;
  // cuBLASLt reads the activation scales with the rows padded to 4: so is the GEMM's m. The pad
  // rows hold whatever the scratch held; each output row depends on its own row only, and the
  // pad rows' outputs land in scratch, so nothing clears them.
  const int64_t m_pad = Fp8ActScaleStride(m);
  const int64_t scale_floats = (k / 128) * m_pad;
  RETURN_IF_ERROR(Reserve(fp8_act_, static_cast<size_t>(m_pad * k)));
  RETURN_IF_ERROR(Reserve(fp8_act_scales_, static_cast<size_t>(scale_floats) * sizeof(float)));
  const bool out_f32 = call.out_type == ElemType::kF32;
  const auto out_elem = static_cast<size_t>(out_f32 ? 4 : 2);
  if (m_pad != m) RETURN_IF_ERROR(Reserve(fp8_out_, static_cast<size_t>(m_pad * n) * out_elem));
  auto* codes = static_cast<uint8_t*>(fp8_act_.view().data);
  auto* scales = static_cast<float*>(fp8_act_scales_.view().data);
  Fp8GemmCall gemm{.w = w.codes.data,
                   .w_scales = w.scales.as<float>(),
                   .x = codes,
                   .x_scales = scales,
                   .out = m_pad != m ? fp8_out_.view().data : call.out,
                   .ldo = m_pad != m ? n : call.ldo,
                   .out_f32 = out_f32,
                   .m = m_pad,
                   .n = n,
                   .k = k};
  // Small batches run faster with a scale per weight row (fp8_w8a8_row_scales_rows), where
  // cuBLASLt has not refused that form of the shape; the block scales remain the fallback.
  const auto with_block_scales = [&w](Fp8GemmCall c) {
    c.w_scales = w.scales.as<float>();
    c.w_row_scales = false;
    return c;
  };
  if (w.row_scales.data != nullptr && m_pad <= options_.fp8_w8a8_row_scales_rows) {
    gemm.w_scales = w.row_scales.as<float>();
    gemm.w_row_scales = true;
    if (gemm_->Fp8Refused(gemm)) gemm = with_block_scales(gemm);
  }
  // A shape cuBLASLt refused before costs no quantisation now.
  if (gemm_->Fp8Refused(gemm)) {
    return absl::UnimplementedError(absl::StrCat("MatmulFp8: W8A8 refused for m=", m_pad,
                                                 " n=", n, " k=", k));
  }
  if (norm != nullptr) {  // the norm writes x and its codes
    NormArgs quantizing = *norm;
    quantizing.fp8_codes = codes;
    quantizing.fp8_scales = scales;
    quantizing.fp8_scale_stride = m_pad;
    RETURN_IF_ERROR(Launched("AddRmsNorm", LaunchRmsNorm(quantizing, stream_)));
  } else if (silu != nullptr) {  // the activation kernel writes act and its codes
    RETURN_IF_ERROR(Launched("SiluMul", LaunchSiluMulQuantizeFp8Rows(
                                            *silu, m, k, codes, scales, stream_,
                                            options_.pdl_decode_kernels)));
  } else {
    RETURN_IF_ERROR(Launched("QuantizeFp8Rows",
                             LaunchQuantizeFp8Rows(call.x, call.ldx, m, k, codes, scales, stream_,
                                                   options_.pdl_decode_kernels)));
  }
  absl::Status ran = gemm_->RunFp8(gemm, stream_);
  if (absl::IsUnimplemented(ran) && gemm.w_row_scales) {  // refused now: nothing ran
    gemm = with_block_scales(gemm);
    ran = gemm_->RunFp8(gemm, stream_);
  }
  RETURN_IF_ERROR(ran);
  if (gemm.out != call.out) {
    const size_t row_bytes = static_cast<size_t>(n) * out_elem;
    RETURN_IF_CUDA_ERROR(cudaMemcpy2DAsync(call.out, static_cast<size_t>(call.ldo) * out_elem,
                                           gemm.out, row_bytes, row_bytes,
                                           static_cast<size_t>(m), cudaMemcpyDeviceToDevice,
                                           stream_));
  }
  // After the GEMM's output rounding (the epilogue bias of the bf16 path rounds once; cuBLASLt's
  // FP8 block scaling is not asked for a bias epilogue here).
  if (call.bias != nullptr) {
    const RowsView rows{call.out, m, n, call.ldo};
    RETURN_IF_CUDA_ERROR(LaunchAddBias(rows, call.out_type, call.bias, call.bias_type, stream_));
  }
  return LaunchedWeights(kOp, cudaGetLastError(), n, k, static_cast<double>(n * k));
}

}  // namespace xserv::kernels::cuda
