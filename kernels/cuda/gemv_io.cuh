// Element I/O shared by the two decode-GEMV forms (gemv.cu, fp8_gemv_mma.cu): which output and
// bias types a GemvArgs may name, reading a bias entry, and storing one output.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemv.h"

namespace xserv::kernels::cuda {

// Outputs and biases are f32 or bf16 (no bias at all is fine too).
inline bool GemvIoTypesSupported(const GemvArgs& a) {
  return (a.out_type == ElemType::kF32 || a.out_type == ElemType::kBF16) &&
         (a.bias == nullptr || a.bias_type == ElemType::kF32 || a.bias_type == ElemType::kBF16);
}

__device__ __forceinline__ float GemvBias(const GemvArgs& a, int64_t n) {
  if (a.bias_type == ElemType::kF32) return static_cast<const float*>(a.bias)[n];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias)[n]);
}

// Output row r, column n (the bias already added), rounded to bf16 unless the output is f32.
__device__ __forceinline__ void GemvStore(const GemvArgs& a, int r, int64_t n, float v) {
  const int64_t o = static_cast<int64_t>(r) * a.ldo + n;
  if (a.out_type == ElemType::kF32) {
    static_cast<float*>(a.out)[o] = v;
  } else {
    static_cast<__nv_bfloat16*>(a.out)[o] = __float2bfloat16_rn(v);
  }
}

}  // namespace xserv::kernels::cuda
