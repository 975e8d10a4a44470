// Device helpers shared by the CUDA kernels: typed loads/stores through fp32 and deterministic
// warp / block reductions. Reductions use a fixed combination order, so a kernel's result never
// depends on scheduling (rule: deterministic outputs for identical inputs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kWarpSize = 32;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T>
__device__ __forceinline__ T QuietNaN() {
  return FromFloat<T>(__int_as_float(0x7fc00000));
}

// Butterfly sum: every lane ends with the bitwise-same value (each step adds the same two
// operands on both partner lanes, and fp addition is commutative).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Sum over the kWarps warps of a CTA that all work on one row; every thread gets the total.
// `scratch` holds >= kWarps floats of shared memory. Warp partials are added in warp order.
template <int kWarps>
__device__ __forceinline__ float CtaSum(float v, float* scratch) {
  v = WarpSum(v);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    __syncthreads();  // earlier readers of scratch are done before it is overwritten
    if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
    __syncthreads();  // all partials visible
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += scratch[w];
    return total;
  }
}

template <int kWarps>
__device__ __forceinline__ float CtaMax(float v, float* scratch) {
  v = WarpMax(v);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    __syncthreads();  // earlier readers of scratch are done before it is overwritten
    if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
    __syncthreads();  // all partials visible
    float total = scratch[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) total = fmaxf(total, scratch[w]);
    return total;
  }
}

template <typename T>
__device__ __forceinline__ T* RowPtr(const RowsView& v, int64_t r) {
  return static_cast<T*>(v.data) + r * v.stride;
}

// Lets kKernel use `bytes` of dynamic shared memory (over the default 48 KB) on the current
// device. The attribute is set only when a launch first needs more than before, so a decode graph
// captures launches whose first, direct run already raised it (no attribute call while capturing).
template <auto kKernel>
cudaError_t AllowDynamicSharedMemory(int64_t bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> allowed[kMaxDevices] = {};
  if (bytes <= 48 * 1024) return cudaSuccess;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (device < kMaxDevices && bytes <= allowed[device].load()) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  if (err == cudaSuccess && device < kMaxDevices) allowed[device].store(bytes);
  return err;
}

}  // namespace xserv::kernels::cuda
