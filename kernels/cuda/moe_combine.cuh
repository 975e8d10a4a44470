// The MoE combine of one token's top-k expert outputs (kernel_types.h MoeCombineRows), as every
// kernel that forms it computes it: LaunchMoeCombine (moe_quantized.cu) and the norm that folds it
// in (norm.cu, NormArgs::combine) give the same bits.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// Whether token t routes to an expert outside [0, experts): its row is then NaN.
__device__ __forceinline__ bool CombineHasBadId(const MoeCombineRows& m, int64_t t) {
  bool bad = false;
  for (int j = 0; j < m.k; ++j) {
    const int e = m.ids[t * m.k + j];
    bad = bad || e < 0 || e >= m.experts;
  }
  return bad;
}

// Two bf16 NaNs (kBf16NaNBits): what the combine stores for a token with a bad id.
inline constexpr uint32_t kBf16NaNPairBits = uint32_t{kBf16NaNBits} * 0x10001u;

// 8 of them.
__device__ __forceinline__ uint4 NaNBf16x8() {
  return make_uint4(kBf16NaNPairBits, kBf16NaNPairBits, kBf16NaNPairBits, kBf16NaNPairBits);
}

// Columns c0 .. c0 + 3 of token t's combined row (f32, before rounding): fused multiply-adds in
// slot order. Rows of `cols` floats, c0 a multiple of 4, y 16-byte aligned.
__device__ __forceinline__ float4 CombineFloat4(const MoeCombineRows& m, int64_t t, int64_t cols,
                                                int64_t c0) {
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j = 0; j < m.k; ++j) {
    const float w = m.weights[t * m.k + j];
    const float4 v = *reinterpret_cast<const float4*>(m.y + (t * m.k + j) * cols + c0);
    sum.x = __fmaf_rn(w, v.x, sum.x);
    sum.y = __fmaf_rn(w, v.y, sum.y);
    sum.z = __fmaf_rn(w, v.z, sum.z);
    sum.w = __fmaf_rn(w, v.w, sum.w);
  }
  return sum;
}

}  // namespace xserv::kernels::cuda
