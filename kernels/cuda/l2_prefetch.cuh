// The device side of l2_prefetch.h: a grid's threads issue an L2Prefetch, one row each in turn.
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// Thread `thread` of `threads` asks L2 for rows thread, thread + threads, ... of `p`
// (cp.async.bulk.prefetch: no registers, no wait; sm_90). Reads constants only, so it may come
// anywhere in a PDL kernel.
__device__ __forceinline__ void IssueL2Prefetch(const L2Prefetch& p, int thread, int threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (int r = thread; r < p.rows; r += threads) {
    const char* at = static_cast<const char*>(p.base) + r * p.stride + p.offset;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(p.bytes));
  }
#endif
}

// A GEMV's own weight row before its PDL wait (CudaBackendOptions::l2_prefetch_own): bytes
// [offset, offset + b) of `row` (row_bytes long, 16-byte aligned), b the `budget` shared by
// `rows` rows in whole 128-byte lines and at most the rest of the row. row_bytes - offset must
// be a multiple of 16 (k of the GEMV's weights is).
__device__ __forceinline__ void PrefetchOwnRow(const void* row, int64_t row_bytes, int64_t offset,
                                               int64_t budget, int64_t rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (offset >= row_bytes || rows <= 0) return;
  const int64_t bytes = min(row_bytes - offset, budget / rows / 128 * 128);
  if (bytes < 16) return;
  const char* at = static_cast<const char*>(row) + offset;
  const int size = static_cast<int>(bytes);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(size));
#endif
}

}  // namespace xserv::kernels::cuda
