// FP8 E4M3 on the device: the arithmetic every dynamic quantiser shares (the W8A8 activations,
// fp8_quant.cu; the FP8 KV cache, paged_kv.cu and qk_norm_rope.cu), twin of kernels/fp8.h
// QuantizeFp8Group on the host, and the decode the attention kernels read codes with.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace xserv::kernels::cuda {

// A group's scale from the amax of its values (reduced over the group first): amax / 448, 1 where
// that is 0 (an all-zero group, or an amax so small the quotient underflows).
__device__ __forceinline__ float Fp8ScaleOf(float amax) {
  const float quotient = amax / 448.0f;
  return quotient > 0.0f ? quotient : 1.0f;
}

// E4M3(value / scale), round to nearest even, saturating at +-448.
__device__ __forceinline__ uint8_t Fp8CodeOf(float value, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value / scale, __NV_SATFINITE, __NV_E4M3));
}

// Exact: every E4M3 value is a half.
__device__ __forceinline__ float Fp8Value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// Two codes of one 16-bit word (low byte first) as the bits of an f16x2 (exact; the low byte's
// half in the low 16 bits): a tensor-core fragment register (fp8_gemv_mma.cu).
__device__ __forceinline__ uint32_t Fp8PairHalf2Bits(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

// Two codes of one 16-bit word (low byte first).
__device__ __forceinline__ float2 Fp8Pair(uint16_t codes) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3)));
}

// One (token, kv head) of an FP8 KV cache from the warp that holds it, lane l owning columns
// l + 32 j (j < kPerLane, those below head_dim): codes[col] and, from lane 0, *scale.
template <int kPerLane>
__device__ __forceinline__ void StoreFp8Head(const float (&v)[kPerLane], int head_dim,
                                             uint8_t* codes, float* scale) {
  const int lane = threadIdx.x % kWarpSize;
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (lane + kWarpSize * j < head_dim) amax = fmaxf(amax, fabsf(v[j]));
  }
  const float s = Fp8ScaleOf(WarpMax(amax));
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int col = lane + kWarpSize * j;
    if (col < head_dim) codes[col] = Fp8CodeOf(v[j], s);
  }
  if (lane == 0) *scale = s;
}

}  // namespace xserv::kernels::cuda
