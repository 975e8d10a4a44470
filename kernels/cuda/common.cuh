// Device helpers shared by the CUDA kernels: typed loads/stores through fp32 and deterministic
// warp / block reductions. Reductions use a fixed combination order, so a kernel's result never
// depends on scheduling (rule: deterministic outputs for identical inputs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

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

// 8 bf16 in one 16-byte vector to floats and back (round to nearest even), for kernels that
// move rows with 16-byte loads and stores; Aligned16 tells whether a pointer allows them.
__device__ __forceinline__ void UnpackBf16x8(const uint4& raw, float* out) {
  const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pair[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ uint4 PackBf16x8(const float* in) {
  uint4 raw;
  __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  return raw;
}
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A gated MLP's activation, silu(g) * u: one formula for the SiluMul kernels (elementwise.cu)
// and the GEMV that computes it while staging its input (gemv.cu), which must agree bit for bit.
struct SiluMulOp {
  __device__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};

// RMSNorm's 1 / rms of a row of n values from their sum of squares, and RoPE's rotation of a
// pair: one formula each for the separate kernels (norm.cu, rope.cu) and the fused one
// (qk_norm_rope.cu), which must agree with them bit for bit.
__device__ __forceinline__ float RmsInv(float sum_sq, int64_t n, float eps) {
  return rsqrtf(sum_sq / static_cast<float>(n) + eps);
}
__device__ __forceinline__ float2 RotatePair(float x1, float x2, float c, float s) {
  return make_float2(x1 * c - x2 * s, x2 * c + x1 * s);
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

// Lets kKernel use `bytes` of dynamic shared memory (over the default 48 KB, which its static
// shared memory counts against too) on the current device. The attribute is set only when a
// launch first needs more than before, so a decode graph captures launches whose first, direct
// run already raised it (no attribute call while capturing).
template <auto kKernel>
cudaError_t AllowDynamicSharedMemory(int64_t bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> allowed[kMaxDevices] = {};
  static const int64_t static_bytes = [] {  // unknown: as if the default left no room
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, kKernel) == cudaSuccess
               ? static_cast<int64_t>(attributes.sharedSizeBytes)
               : int64_t{48 * 1024};
  }();
  if (bytes + static_bytes <= 48 * 1024) return cudaSuccess;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (device < kMaxDevices && bytes <= allowed[device].load()) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  if (err == cudaSuccess && device < kMaxDevices) allowed[device].store(bytes);
  return err;
}

// The device's SM count (one device per process).
inline int SmCount() {
  static const int sms = [] {
    int device = 0, count = 132;
    if (cudaGetDevice(&device) == cudaSuccess) {
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    }
    return count;
  }();
  return sms;
}

// CTAs of `threads` threads of kKernel that one SM holds with `smem` bytes of dynamic shared
// memory, asked once per size (a host-side calculation, but microseconds that every eager launch
// would repeat): the grid of a kernel whose CTAs are all resident at once. One device per
// process and one block size per kernel, as SmCount assumes.
template <auto kKernel>
cudaError_t ResidentPerSm(int threads, size_t smem, int* per_sm) {
  static std::mutex mu;
  static std::map<size_t, int> known;
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = known.find(smem); it != known.end()) {
    *per_sm = it->second;
    return cudaSuccess;
  }
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kKernel, threads, smem);
  if (err == cudaSuccess) known.emplace(smem, *per_sm);
  return err;
}

// Asks for kKernel's largest shared-memory carveout on the current device, once per device (as
// above: before any graph captures the kernel's launches). A failure is not remembered.
template <auto kKernel>
cudaError_t PreferMaxSharedCarveout() {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> done[kMaxDevices] = {};
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (device < kMaxDevices && done[device].load()) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(
      kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (err == cudaSuccess && device < kMaxDevices) done[device].store(true);
  return err;
}

}  // namespace xserv::kernels::cuda
