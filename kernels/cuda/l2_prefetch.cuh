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

}  // namespace xserv::kernels::cuda
