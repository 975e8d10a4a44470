// The steps of an add + RMSNorm over a row of 16-byte bf16 vectors. RmsNormVecKernel (norm.cu)
// and the GEMV's norm prologue (gemv.cu, GemvArgs::norm) both run them with thread t of a
// kRmsNormVecThreads-thread CTA taking vectors t, t + kRmsNormVecThreads, ... in order and CtaSum
// over its warps, so the two give the same bits.
#pragma once

#include "kernels/cuda/common.cuh"

namespace xserv::kernels::cuda {

// Both kernels' CTA size (each static_asserts its own against it).
inline constexpr int kRmsNormVecThreads = 256;

// residual + x, rounded to bf16 as the residual stream stores it (the returned vector); `v`
// gets the stored values as floats, which is what the norm then normalises.
__device__ __forceinline__ uint4 AddResidualBf16x8(const uint4& x, const uint4& residual,
                                                   float* v) {
  float r[8];
  UnpackBf16x8(residual, r);
  UnpackBf16x8(x, v);
#pragma unroll
  for (int e = 0; e < 8; ++e) r[e] += v[e];
  const uint4 stored = PackBf16x8(r);
  UnpackBf16x8(stored, v);
  return stored;
}

// sum_sq plus the squares of v's 8 values, in order.
__device__ __forceinline__ float AddSquares8(const float* v, float sum_sq) {
#pragma unroll
  for (int e = 0; e < 8; ++e) sum_sq += v[e] * v[e];
  return sum_sq;
}

// weight * (v * inv), rounded to bf16: one normalised vector.
__device__ __forceinline__ uint4 RmsScaleBf16x8(const uint4& weight, const float* v, float inv) {
  float w[8];
  UnpackBf16x8(weight, w);
#pragma unroll
  for (int e = 0; e < 8; ++e) w[e] *= v[e] * inv;
  return PackBf16x8(w);
}

}  // namespace xserv::kernels::cuda
