// A grid-wide barrier for the persistent benchmark kernels (persistent_step.cu,
// persistent_ring.cu), launched cooperatively so that every CTA is resident.
#pragma once

#include <cuda_runtime.h>

namespace xserv::kernels::cuda::bench {

// All CTAs of the grid have arrived `target` times in total (each arrives once per barrier; the
// counter only grows, zeroed before the launch).
__device__ __forceinline__ void GridBarrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's writes (ordered before by the barrier above) become visible
    atomicAdd(counter, 1u);
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

}  // namespace xserv::kernels::cuda::bench
