// Launcher of the skinny GEMM for decode (gemv.cu): out[m, n] = x[m, k] · w[n, k]^T (+ bias[n])
// for a handful of rows, streaming the bf16 weights once at close to the HBM bandwidth. GemmRunner
// sends such calls here instead of cuBLASLt when GemvSupports says yes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

inline constexpr int64_t kGemvMaxRows = 8;
// bf16 weights of at most this many bytes take the GEMV at <= kGemvMaxRows rows even when
// GemmOptions::gemv is off (gemm.cc says why).
inline constexpr int64_t kGemvSmallWeightBytes = 1 << 20;
// x is staged in shared memory as bf16: m * k * 2 bytes must fit.
inline constexpr int64_t kGemvMaxSharedBytes = 96 * 1024;
// An add + RMSNorm ahead of the GEMV (Backend::AddRmsNormMatmul): GemvArgs::x holds the previous
// block's output, and every CTA stages normed = RmsNorm(residual + x) * weight as its x (without
// a residual: RmsNorm(x) * weight), with the steps and order of the norm kernel's
// (rms_norm_vec.cuh), so the bits equal that kernel's and then the GEMV's. CTA 0 also stores the
// sum to residual_out and the normalised rows to normed. One row of FP8 weights only: on an
// H200 bf16 weights measured slower fused than as the norm kernel and the GEMV under PDL
// (xserv-gemv-bench, docs/benchmarks session 16: the one-column tile's occupancy falls from 6 to
// 5 CTAs per SM, and every CTA reads the residual too), and so did Qwen3-8B's FP8 step at 2
// rows (3.91 -> 3.94 ms; 3.26 -> 3.20 at 1). bf16 x, residual and outputs, rows
// the norm kernel takes as vectors (norm.h: RmsNormTakesVectors); the weight takes another
// k * 2 bytes of shared memory; residual_out must not overlap residual or x.
struct GemvNorm {
  const void* residual = nullptr;  // null: no add (and no residual_out)
  int64_t ld_residual = 0;
  void* residual_out = nullptr;
  int64_t ld_residual_out = 0;
  void* normed = nullptr;
  int64_t ld_normed = 0;
  const void* weight = nullptr;  // [k]; null: no norm
  float eps = 1e-6f;
};

struct GemvArgs {
  const void* x = nullptr;  // bf16 [m, k], row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;  // bf16 [n, k], row stride ldw
  int64_t ldw = 0;
  void* out = nullptr;      // out_type [m, n], row stride ldo
  int64_t ldo = 0;
  ElemType out_type = ElemType::kBF16;
  const void* bias = nullptr;  // bias_type [n] or null
  ElemType bias_type = ElemType::kBF16;
  int m = 0, n = 0, k = 0;
  // Non-null: w holds FP8 E4M3 codes ([n, k] bytes, row stride ldw bytes) with block scales:
  // w[i][j] = E4M3(code) * scales[(i / block) * scale_cols + j / block] (kernels/fp8.h).
  const float* scales = nullptr;
  int64_t scale_cols = 0;
  int block = 0;
  // A gated MLP's gate_up projection with SiluMul as its epilogue: w's rows are [gate; up]
  // (n even) and out [m, n / 2] gets silu(gate_j) * up_j, each of gate_j = column j and up_j =
  // column j + n / 2 (bias added) rounded to bf16 first, as a bf16 output would be, then
  // combined and rounded as the SiluMul kernel does: the GEMV then SiluMul bit for bit, one
  // kernel and no gate_up round trip. m = 1, bf16 weights and output; one warp reads both rows.
  bool glu = false;
  GemvNorm norm;  // not with glu
  // Launch with programmatic dependent launch (pdl.cuh): the first weight loads overlap the
  // previous kernel.
  bool pdl = false;
  // Part of the next matmul's weight that the threads ask L2 for as they finish (l2_prefetch.h);
  // rows = 0: none.
  L2Prefetch prefetch;
  // Instead, or too: bytes of its own weight that the GEMV asks L2 for before its PDL wait, shared
  // by the rows of its first pass, past each row's first batch of loads (PrefetchOwnRow); 0: none.
  int64_t own_prefetch_bytes = 0;
  // The tile, for benchmarks (0: the measured default): columns per warp and loads of each in
  // flight per lane, one of 1x4, 1x8, 2x4, 4x2, 4x4. Results do not depend on it.
  int tile_cols = 0;
  int tile_unroll = 0;
  // For benchmarks: at most this many CTAs per SM (0: as many as fit, the default). Fewer leave
  // room for the next kernel's CTAs to be resident, and issue their first loads, while this one
  // streams.
  int max_ctas_per_sm = 0;
};

// m in [1, kGemvMaxRows], k a multiple of 8 (16 and a block a multiple of 16 for FP8 weights),
// 16-byte aligned rows of x and w, x small enough for shared memory, bf16 or f32 output and bias.
bool GemvSupports(const GemvArgs& args);

cudaError_t LaunchGemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
