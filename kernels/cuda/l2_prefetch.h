// Weights read into L2 ahead of their matmul (Backend::PrefetchAfterNextMatmul).
//
// Why: at batch 1 a decode step alternates weight-streaming GEMVs with latency-bound kernels
// (norms, q/k norm + RoPE, attention, SiluMul) during which the HBM is nearly idle: in a traced
// Qwen3-8B step those kernels held the critical path for about 24 µs per layer (docs/benchmarks,
// session 14). A GEMV that has issued its last loads also has the next matmul's weight to hand
// (CudaBackend takes it from the hint), so its threads ask L2 for a part of that weight as they
// finish (IssueL2Prefetch, one bulk prefetch per row), and the memory streams it during the
// kernels in between. The next GEMV then reads that part from L2. The prefetch never changes a
// result; it costs nothing but the bytes when the hint is wrong. The other form
// (CudaBackendOptions::l2_prefetch_own, PrefetchOwnRow in l2_prefetch.cuh): each GEMV, launched
// early under PDL, asks for more of its own first rows before it waits for its input. Which
// pays, if either, is for the GPU host to measure (docs/benchmarks, session 18).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// Bytes of a weight row that a decode GEMV launched with PDL asks for before its wait anyway (its
// first batch of loads: 4 loads of 16 bytes per lane, static_asserts in gemv.cu and
// fp8_gemv_mma.cu), so the prefetch starts after them. That holds for the rows of each warp's
// first column group, which at batch 1 are all of them but for the widest weights (gate_up,
// lm_head), whose later rows then miss their first 2 KB here.
inline constexpr int64_t kGemvPreloadBytes = 2048;

// Bytes of each row a prefetch asks for: the `budget` shared by `rows` rows in whole 128-byte
// lines, at most the row's `rest` bytes (whole 16-byte units); 0 under 16 bytes. The one rule
// of both forms (L2PrefetchFor here, PrefetchOwnRow on the device).
__host__ __device__ inline int64_t L2PrefetchRowBytes(int64_t rest, int64_t budget, int64_t rows) {
  if (rows <= 0 || rest <= 0 || budget <= 0) return 0;
  const int64_t lines = budget / rows / 128 * 128, whole = rest / 16 * 16;
  const int64_t bytes = lines < whole ? lines : whole;
  return bytes >= 16 ? bytes : 0;
}

// The prefetch of an [rows, row_bytes] weight whose rows lie `stride` bytes apart, within
// `budget` bytes: of every row the same whole number of 128-byte lines from kGemvPreloadBytes on
// (or from 0 for rows no longer than that), at most the rest of the row. Nothing (rows = 0) for
// a budget under one line per row, unaligned rows, or sizes past int32.
L2Prefetch L2PrefetchFor(const void* base, int64_t stride, int64_t rows, int64_t row_bytes,
                         int64_t budget);

}  // namespace xserv::kernels::cuda
