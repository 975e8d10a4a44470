// FP8 E4M3 on the device: the arithmetic every dynamic quantiser shares (the W8A8 activations,
// fp8_quant.cu; the FP8 KV cache, paged_kv.cu and qk_norm_rope.cu), twin of kernels/fp8.h
// QuantizeFp8Group on the host, and the decode the attention kernels read codes with.
#pragma once

#include <cuda_bf16.h>
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

// E4M3 codes at bytes 0 and 2 of t as exact bf16x2 (byte 0 in the low half), in integer ops and
// one bf16x2 multiply: sign to bit 15, exponent and mantissa (7 bits) shifted so that E4M3's 4
// exponent bits become the bottom of bf16's 8 and its 3 mantissa bits the top of bf16's 7, which
// is the code's value times 2^-120 (a subnormal code a bf16 subnormal of the same scaled value);
// the multiply by 2^120 restores it exactly. Bytes 1 and 3 are ignored. (The NaN codes 0x7F and
// 0xFF come out as +-480; the quantisers here never write them.)
__device__ __forceinline__ uint32_t Fp8CodesToBf16x2(uint32_t t) {
  const uint32_t bits = ((t & 0x00800080u) << 8) | ((t & 0x007F007Fu) << 4);
  constexpr uint32_t kTwo120 = (247u << 7) | (247u << 23);  // 2^120 as bf16, twice
  __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  x = __hmul2(x, *reinterpret_cast<const __nv_bfloat162*>(&kTwo120));
  return *reinterpret_cast<const uint32_t*>(&x);
}

// Two codes of one 16-bit word (low byte first) as exact f16x2 (every E4M3 value, subnormals
// included, is an f16): one hardware conversion on sm_89+.
__device__ __forceinline__ uint32_t Fp8PairToF16x2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return uint32_t{h.x} | (uint32_t{h.y} << 16);
}

// Two codes of one 16-bit word (low byte first).
__device__ __forceinline__ float2 Fp8Pair(uint16_t codes) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3)));
}

// The 16 codes of one 16-byte load as floats, in order (the FP8 decode GEMVs' weights).
__device__ __forceinline__ void Fp8Unpack16(const uint4& w, float* out) {
  const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&w);
#pragma unroll
  for (int h = 0; h < 8; ++h) {
    const float2 f = Fp8Pair(pairs[h]);
    out[2 * h] = f.x;
    out[2 * h + 1] = f.y;
  }
}

// One 16-byte load's 16 E4M3 codes times x's 16 matching values, in the FP8 GEMV's order
// (gemv.cu): the partial its block scale then multiplies.
__device__ __forceinline__ float Fp8Dot16(const uint4& w, const float (&xf)[16]) {
  const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&w);
  float part = 0.0f;
#pragma unroll
  for (int h = 0; h < 8; ++h) {
    const float2 f = Fp8Pair(pairs[h]);
    part = fmaf(f.x, xf[2 * h], part);
    part = fmaf(f.y, xf[2 * h + 1], part);
  }
  return part;
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
