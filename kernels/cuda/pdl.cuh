// Programmatic dependent launch (PDL, sm_90): a kernel launched with the programmatic-serialization
// attribute may start while the kernel before it in the stream is still running, so its launch
// latency and whatever it does before PdlWait() (e.g. streaming weights, which no earlier kernel
// writes) overlap the previous kernel's tail. Decode at batch 1 is a chain of ~300 short kernels,
// where those gaps add up (docs/benchmarks/README.md).
//
// Contract of a kernel launched through LaunchMaybePdl(..., pdl = true): before PdlWait() it
// writes nothing and reads only memory that the previous kernel of the stream does not write:
// model weights and constants (not a weight decoded into scratch by the previous kernel:
// GemmCall::w_from_stream), the step's host inputs, and what kernels before the previous one
// wrote (the chain of waits, below). PdlWait() returns once the previous kernel has completed
// and its writes are visible (not merely triggered), so what follows is ordered as after a plain
// launch. PdlLaunchDependents() lets the next kernel, if launched with the attribute, be
// scheduled; it does so even in a kernel that was itself launched plainly (the peer all-reduce
// triggers at its start). PdlWait() is a no-op in a plainly launched kernel, which starts only
// once its predecessor has completed. Stream capture keeps the attribute as a programmatic graph
// edge.
//
// The chain of waits: every kernel launched with the attribute waits in every CTA before it
// triggers or exits (PdlBegin; a CTA with nothing to do calls PdlWait before it returns), and a
// plainly launched kernel starts only after its predecessor has completed. Either way a kernel
// can start only once every kernel before its predecessor has completed, so what those wrote
// (the router's ids two kernels back, KV rows of earlier steps) may be read before PdlWait too;
// only the previous kernel's own output may not. This holds as long as no kernel launched with
// the attribute triggers or exits before it waits: keep it so for every kernel launched through
// LaunchMaybePdl (today only this project's kernels are).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace xserv::kernels::cuda {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// The start of a kernel that may be a PDL launch and may be followed by one: waits for the
// previous kernel, then lets the next one launch. Triggering only after the wait keeps at most
// one kernel launched ahead; triggering first let whole chains of small kernels launch early and
// hold SM slots while the GEMVs streamed (measured 12 % slower at batch 1).
__device__ __forceinline__ void PdlBegin() {
  PdlWait();
  PdlLaunchDependents();
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// when `pdl` (the kernel must keep the contract above).
template <typename... Params, typename... Args>
cudaError_t LaunchMaybePdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = pdl ? &attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace xserv::kernels::cuda
