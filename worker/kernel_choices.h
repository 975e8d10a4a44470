// The CUDA backend's kernel choices as command-line flags, shared by xserv-worker and
// xserv-engine-bench so that both expose the same switches with the same defaults and words.
// Plain values: the flags parse on builds without CUDA too, where they do nothing;
// CudaOptionsOf (CUDA builds) turns them into the backend's options.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#if XSERV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace xserv::worker {

struct KernelChoices {
  bool flash_prefill = true;       // tensor-core prefill attention
  bool decode_attention = true;    // GQA-packed tensor-core decode attention
  bool decode_keys_as_m = true;   // ... with the keys as the MMAs' M dimension
  bool decode_four_ctas_per_sm = true;  // ... sized 4 per SM at large batches
  bool decode_kv_heads_first = true;   // ... a sequence's kv heads adjacent in the grid
  int decode_wide_max_pairs = 256;     // ... 8-warp CTAs of 512 keys up to this many pairs
  bool fuse_qk_norm_rope = true;   // q/k norms, rotary and the KV write as one kernel
  bool fuse_silu_gemv = false;     // SiluMul as the single-row gate_up GEMV's epilogue
  bool fuse_moe_norm = false;      // the MXFP4 experts' combine formed inside the next norm
  bool fuse_norm_gemv = true;      // each block's add + RMSNorm in its first FP8 decode GEMV
  bool fuse_norm_quant = false;    // that norm writes the W8A8 activation codes too
  bool fuse_silu_quant = false;    // the MLP's SiluMul writes the down projection's codes too
  bool fused_mlp_row = false;      // a one-row FP8 MLP as one kernel (down transposed at load)
  bool gemm_autotune = false;      // time cuBLASLt candidates per GEMM shape family
  bool fp8_w8a8 = false;           // FP8 activations + block-scaled FP8 GEMM above 8 rows
  int fp8_w8a8_row_scales_rows = 64;  // ... with per-row weight scales up to this many rows
  bool fp8_gemv_mma = true;        // FP8-weight decode GEMV on tensor cores from 2 rows
  int fp8_gemv_mma_min_rows = 2;   // ... from this many rows (kFp8MmaGemvMinRows)
  bool gemv = true;                // own skinny GEMV for single-row bf16 matmuls
  int l2_prefetch_mb = 0;          // MiB of the next matmul's weight a decode GEMV prefetches
  bool l2_prefetch_own = false;    // ... of its own weight, before its PDL wait, instead
  std::string pdl = "all";         // which kernels launch while their predecessor runs
};

inline void AddKernelChoiceFlags(CLI::App& app, KernelChoices& k) {
  app.add_option("--flash-prefill", k.flash_prefill,
                 "cuda: prefill attention on tensor cores for prompts of >= 16 tokens (head_dim "
                 "64/128; not with --batch-invariant)")
      ->capture_default_str();
  app.add_option("--decode-attention", k.decode_attention,
                 "cuda: decode attention on tensor cores with each kv head's query heads packed "
                 "into one tile (head_dim 64/128; not with --batch-invariant)")
      ->capture_default_str();
  app.add_option("--decode-attention-keys-as-m", k.decode_keys_as_m,
                 "cuda, with --decode-attention: the keys are the MMAs' M dimension and a kv "
                 "head's (at most 8) query heads their N, which halves the MMAs and "
                 "accumulators of a decode tile (Qwen3-8B on an H200, 256 rows: FP8 cache 9 %, "
                 "bf16 2 % off the step, docs/benchmarks session 24); sequences of more than "
                 "8 / group new rows go to the CUDA-core kernel")
      ->capture_default_str();
  app.add_option("--decode-attention-four-ctas-per-sm", k.decode_four_ctas_per_sm,
                 "cuda, with --decode-attention-keys-as-m, a bf16 cache at head_dim 128 and >= "
                 "1024 (sequence, kv head) pairs: CTAs of 3 warps, 4 per SM instead of 3 of 4 "
                 "warps (Qwen3-8B on an H200, 256 rows: 2 % off the step, docs/benchmarks "
                 "session 25)")
      ->capture_default_str();
  app.add_option("--decode-attention-kv-heads-first", k.decode_kv_heads_first,
                 "cuda, with --decode-attention: a sequence's kv heads are adjacent in the "
                 "kernel's grid, so that they read the same KV-cache rows at about the same time "
                 "(FP8 cache: 1 % off Qwen3-8B's step at 128-256 rows; bf16 within noise)")
      ->capture_default_str();
  app.add_option("--decode-attention-wide-max-pairs", k.decode_wide_max_pairs,
                 "cuda, with --decode-attention-keys-as-m: steps of at most this many "
                 "(sequence, kv head) pairs, and at least half as many as the GPU has SMs, run "
                 "CTAs of 8 warps that each take 512 keys before the keys spread over more CTAs, "
                 "so short contexts need no merge kernel (Qwen3-8B, 8 kv heads, on an H200: "
                 "b=16 5.39 -> 5.14 ms a step, b=32 5.76 -> 5.71, b=64 6.26 -> 6.72, "
                 "docs/benchmarks session 26); 0: never")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--fuse-qk-norm-rope", k.fuse_qk_norm_rope,
                 "cuda: q/k norms, rotary embedding and the KV write as one kernel per layer "
                 "(bit-identical to the separate ops), q/k/v stacked into one projection")
      ->capture_default_str();
  app.add_option("--fuse-silu-gemv", k.fuse_silu_gemv,
                 "cuda: at batch 1 the MLP's silu(gate) * up is the gate_up projection GEMV's "
                 "epilogue (bit-identical to the separate kernel; measured slower on an H200, "
                 "docs/benchmarks)")
      ->capture_default_str();
  app.add_option("--fuse-moe-norm", k.fuse_moe_norm,
                 "cuda, experimental: the next layer's add + RMSNorm forms each token's MoE "
                 "combine itself (MXFP4 experts, one GPU, hidden sizes above 512): a launch per "
                 "layer fewer, bit-identical to the separate kernels")
      ->capture_default_str();
  app.add_option("--fuse-norm-gemv", k.fuse_norm_gemv,
                 "cuda, with --fp8-matmuls: at batch 1 each block's residual add + "
                 "RMSNorm is computed by its first projection's FP8 GEMV while it stages its "
                 "input: a kernel fewer per block, bit-identical (bf16 weights measured slower "
                 "fused and keep the norm kernel)")
      ->capture_default_str();
  app.add_option("--fuse-norm-quant", k.fuse_norm_quant,
                 "cuda, experimental, with --fp8-matmuls and --fp8-w8a8: above 8 rows the norm "
                 "ahead of each block's first projection writes the W8A8 activation codes too, "
                 "instead of the quantiser kernel after it (bit-identical; measured no faster "
                 "in decode, docs/benchmarks session 17)")
      ->capture_default_str();
  app.add_option("--fuse-silu-quant", k.fuse_silu_quant,
                 "cuda, experimental, with --fp8-matmuls and --fp8-w8a8: above 8 rows the MLP's "
                 "SiluMul writes the down projection's W8A8 activation codes too, instead of the "
                 "quantiser kernel after it (bit-identical; 1 % at 64 rows, nothing at 256 or "
                 "served, docs/benchmarks sessions 20-22)")
      ->capture_default_str();
  app.add_option("--fused-mlp-row", k.fused_mlp_row,
                 "cuda, experimental, with --fp8-matmuls: at one row each gated MLP (gate_up, "
                 "SiluMul, down) runs as one kernel whose CTAs each take 32 intermediate columns "
                 "and add their share of the output, instead of three kernels that wait for each "
                 "other (Qwen3-8B's MLP on an H200: 42.2 against 46.6 µs, docs/benchmarks "
                 "session 34); keeps a transposed copy of every FP8 down projection (1.8 GB on "
                 "Qwen3-8B), on MLPs of at least two 32-column units per SM; sums in the order "
                 "the CTAs finish, so not with --batch-invariant")
      ->capture_default_str();
  app.add_option("--gemm-autotune", k.gemm_autotune,
                 "cuda, experimental: time cuBLASLt's candidates per GEMM shape family on first "
                 "use (W8A8: per shape, the heuristic's top 32; bf16: also every tile, stage "
                 "count and cluster shape its algorithms list) and keep the fastest where it "
                 "beats the heuristic's pick by 3 % (not with --batch-invariant; on Qwen3-8B's "
                 "shapes it finds kernels up to 20 % faster alone that leave the graphed step "
                 "no faster, docs/benchmarks session 26)")
      ->capture_default_str();
  app.add_option("--fp8-w8a8", k.fp8_w8a8,
                 "cuda, experimental, with --fp8-matmuls: steps of more than 8 rows quantise "
                 "their activations to FP8 per row and 128 columns and run cuBLASLt's FP8 "
                 "block-scaled GEMM (W8A8) instead of decoding the weights to bf16")
      ->capture_default_str();
  app.add_option("--fp8-w8a8-row-scales-rows", k.fp8_w8a8_row_scales_rows,
                 "cuda, with --fp8-w8a8: W8A8 GEMMs of at most this many rows give cuBLASLt "
                 "the weight scales once per row (made at load, 4 bytes per row and 128 "
                 "columns), whose kernels are faster at small batches (Qwen3-8B on an H200: "
                 "12-15 % off the step at 16-64 rows, 4 % slower at 128, docs/benchmarks "
                 "session 23); 0: never")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--fp8-gemv-mma", k.fp8_gemv_mma,
                 "cuda, with --fp8-matmuls: decode steps of --fp8-gemv-mma-min-rows to 8 rows "
                 "multiply the FP8 weights on tensor cores (codes to bf16 by shifts) instead of "
                 "the CUDA-core GEMV (measured faster from 2 rows, docs/benchmarks)")
      ->capture_default_str();
  app.add_option("--fp8-gemv-mma-min-rows", k.fp8_gemv_mma_min_rows,
                 "cuda, with --fp8-gemv-mma: the decode rows from which the FP8 weights go to "
                 "tensor cores (below: the CUDA-core GEMV; at 1 row that GEMV also takes the "
                 "block's norm, --fuse-norm-gemv, which the tensor-core one does not)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--gemv", k.gemv,
                 "cuda: own skinny GEMV kernel for single-row bf16 matmuls (batch-1 decode) "
                 "instead of cuBLASLt (weights <= 1 MiB take it up to 8 rows anyway)")
      ->capture_default_str();
  app.add_option("--l2-prefetch-mb", k.l2_prefetch_mb,
                 "cuda, experimental: as a decode GEMV finishes it asks L2 for up to this many "
                 "MiB of the next matmul's weight, which then streams during the latency-bound "
                 "kernels in between (norms, attention); 0: off (measured slower on an H200, "
                 "docs/benchmarks session 19)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--l2-prefetch-own", k.l2_prefetch_own,
                 "cuda, experimental, with --l2-prefetch-mb: each decode GEMV asks L2 for that "
                 "many MiB of its own weight before it waits for its input, instead of the next "
                 "matmul's as it ends")
      ->capture_default_str();
  app.add_option("--pdl", k.pdl,
                 "cuda: programmatic dependent launch: 'gemv' lets the single-row GEMV launch "
                 "while its predecessor runs (its first weight loads go out before its input is "
                 "ready), 'all' also the decode path's norms, SiluMul, q/k norm + RoPE, "
                 "attention, router top-k and MoE experts, 'off' none")
      ->check(CLI::IsMember({"off", "gemv", "all"}))
      ->capture_default_str();
}

#if XSERV_HAVE_CUDA
// The CUDA backend's options for device 0 with these kernel choices; `fp8_matmuls`: the model
// keeps FP8 weights (the norm prologue is for those only, gemv.h GemvNorm).
inline kernels::cuda::CudaBackendOptions CudaOptionsOf(const KernelChoices& k,
                                                       bool batch_invariant, bool fp8_matmuls) {
  return {.device = 0,
          .batch_invariant = batch_invariant,
          .gemv = k.gemv,
          .pdl = k.pdl != "off",
          .pdl_decode_kernels = k.pdl == "all",
          .gemm_autotune = k.gemm_autotune,
          .flash_prefill = k.flash_prefill,
          .decode_attention = k.decode_attention,
          .decode_attention_keys_as_m = k.decode_keys_as_m,
          .decode_attention_four_ctas_per_sm = k.decode_four_ctas_per_sm,
          .decode_attention_kv_heads_first = k.decode_kv_heads_first,
          .decode_attention_wide_max_pairs = k.decode_wide_max_pairs,
          .fuse_qk_norm_rope = k.fuse_qk_norm_rope,
          .fuse_silu_gemv = k.fuse_silu_gemv,
          .fuse_moe_norm = k.fuse_moe_norm,
          .fuse_norm_gemv = k.fuse_norm_gemv && fp8_matmuls,
          .fuse_norm_quant = k.fuse_norm_quant && fp8_matmuls && k.fp8_w8a8,
          .fused_mlp_row = k.fused_mlp_row && fp8_matmuls,
          .fuse_silu_quant = k.fuse_silu_quant && fp8_matmuls && k.fp8_w8a8,
          .fp8_w8a8 = k.fp8_w8a8,
          .fp8_w8a8_row_scales_rows = k.fp8_w8a8_row_scales_rows,
          .fp8_gemv_mma = k.fp8_gemv_mma,
          .fp8_gemv_mma_min_rows = k.fp8_gemv_mma_min_rows,
          .l2_prefetch_bytes = int64_t{k.l2_prefetch_mb} << 20,
          .l2_prefetch_own = k.l2_prefetch_own};
}
#endif

}  // namespace xserv::worker
