// The device side of l2_prefetch.h: a grid's threads issue an L2Prefetch, one row each in turn.
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_types.h"
#include "kernels/cuda/l2_prefetch.h"

namespace xserv::kernels::cuda {

// `bytes` (a multiple of 16) at `at` (16-byte aligned) into L2: cp.async.bulk.prefetch, no
// registers, no wait (sm_90; nothing before).
__device__ __forceinline__ void BulkPrefetchL2(const void* at, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(bytes));
#endif
}

// Thread `thread` of `threads` asks L2 for rows thread, thread + threads, ... of `p`. Reads
// constants only, so it may come anywhere in a PDL kernel.
__device__ __forceinline__ void IssueL2Prefetch(const L2Prefetch& p, int thread, int threads) {
  for (int r = thread; r < p.rows; r += threads) {
    BulkPrefetchL2(static_cast<const char*>(p.base) + r * p.stride + p.offset, p.bytes);
  }
}

// A GEMV's own weight row before its PDL wait (CudaBackendOptions::l2_prefetch_own): bytes
// [offset, offset + b) of `row` (row_bytes long, 16-byte aligned), b = L2PrefetchRowBytes of
// the rest of the row. row_bytes - offset must be a multiple of 16 (k of the GEMV's weights is).
__device__ __forceinline__ void PrefetchOwnRow(const void* row, int64_t row_bytes, int64_t offset,
                                               int64_t budget, int64_t rows) {
  const int64_t bytes = L2PrefetchRowBytes(row_bytes - offset, budget, rows);
  if (bytes > 0) BulkPrefetchL2(static_cast<const char*>(row) + offset, static_cast<int>(bytes));
}

}  // namespace xserv::kernels::cuda
