// What the persistent benchmark kernels share (persistent_step.cu, persistent_ring.cu,
// persistent_ring_w8a8.cu): the grid counters and barrier, the latency phase, the GEMV's 16-code
// partial and the cooperative launch over every resident CTA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/tools/persistent_step.h"

namespace xserv::kernels::cuda::bench {

// The CTA's threads meet: all of them (kThreads 0), or the first kThreads through named
// barrier 1 (a CTA whose other warps run their own loop, e.g. a producer warp).
template <int kThreads = 0>
__device__ __forceinline__ void CtaSync() {
  if constexpr (kThreads == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
  }
}

// A counter shared across the grid: one added with release semantics (this thread's writes, and
// those ordered before it by a CTA barrier, visible to whoever acquires the count), and read
// with acquire semantics.
__device__ __forceinline__ void RedRelease(unsigned* counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}
__device__ __forceinline__ unsigned LoadAcquire(const unsigned* counter) {
  unsigned v = 0;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// All CTAs of the grid have arrived `target` times in total (each arrives once per barrier; the
// counter only grows, zeroed before the launch). kThreads: as CtaSync's, thread 0 among them.
template <int kThreads = 0>
__device__ __forceinline__ void GridBarrier(unsigned* counter, unsigned target) {
  CtaSync<kThreads>();
  if (threadIdx.x == 0) {
    // Arrive by a release reduction (CUTLASS's GenericBarrier does the same): cheaper than a
    // full fence followed by an atomic that returns.
    RedRelease(counter);
    unsigned seen = 0;
    do {
      seen = LoadAcquire(counter);
    } while (seen < target);
  }
  CtaSync<kThreads>();
}

// A latency phase (StreamPhase::w null): CTA 0 (of kThreads threads) copies x's first n values
// to out. In this form the step kernel keeps its 80 registers (3 CTAs per SM); an early return
// and blockDim's stride took it to 102.
template <int kThreads>
__device__ __forceinline__ void RunLatencyPhase(const StreamPhase& p) {
  if (blockIdx.x == 0) {
    const auto* x = static_cast<const __nv_bfloat16*>(p.x);
    auto* out = static_cast<__nv_bfloat16*>(p.out);
    for (int c = threadIdx.x; c < p.n; c += kThreads) out[c] = x[c];
  }
}

// A cooperative launch of `kernel` over every CTA that fits at once (`smem` bytes of dynamic
// shared memory each), given the step's arguments.
template <auto kernel>
cudaError_t LaunchOnEveryResidentCta(const PersistentStepArgs& args, int threads, size_t smem,
                                     cudaStream_t stream) {
  if (const cudaError_t err = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      err != cudaSuccess) {
    return err;
  }
  int per_sm = 0;
  if (const cudaError_t err = ResidentPerSm<kernel>(threads, smem, &per_sm); err != cudaSuccess) {
    return err;
  }
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  PersistentStepArgs a = args;
  void* params[] = {&a};
  return cudaLaunchCooperativeKernel(kernel, dim3(per_sm * SmCount()), dim3(threads), params, smem,
                                     stream);
}

}  // namespace xserv::kernels::cuda::bench
