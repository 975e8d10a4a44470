// Programmatic dependent launch (PDL, sm_90): a kernel launched with the programmatic-serialization
// attribute may start while the kernel before it in the stream is still running, so its launch
// latency and whatever it does before PdlWait() (e.g. streaming weights, which no earlier kernel
// writes) overlap the previous kernel's tail. Decode at batch 1 is a chain of ~300 short kernels,
// where those gaps add up (docs/benchmarks/README.md).
//
// Contract of a kernel launched through LaunchMaybePdl(..., pdl = true): before PdlWait() it only
// reads memory no earlier work of the stream writes (model weights; not a weight decoded into
// scratch by the previous kernel: GemmCall::w_from_stream) and writes nothing. PdlWait() returns once
// every earlier kernel has completed and its writes are visible (not merely triggered), so what
// follows is ordered as after a plain launch. Kernels that the next kernel may overlap call
// PdlLaunchDependents() early; it only lets the dependent be scheduled. Both are no-ops when the
// kernel was launched plainly. Stream capture keeps the attribute as a programmatic graph edge.
//
// The chain of waits: every kernel here waits in every CTA before it triggers or exits (PdlBegin;
// a CTA with nothing to do calls PdlWait before it returns), so a kernel can start only once its
// predecessor has passed its wait, i.e. once every kernel before the predecessor has completed.
// What those wrote (the router's ids two kernels back, KV rows of earlier steps) may therefore
// be read before PdlWait too; only the previous kernel's own output may not.
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
