// The decode GEMVs' norm prologue (GemvNorm, gemv.h): a CTA of kRmsNormVecThreads threads stages
// RmsNorm(residual + x) * weight in shared memory as its x, with the norm kernel's steps and
// order (rms_norm_vec.cuh), so the bits equal that kernel's. Shared by the GEMV (gemv.cu) and the
// gated MLP at one row (gated_mlp_gemv.cu).
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/rms_norm_vec.cuh"

namespace xserv::kernels::cuda {

// s_x [kRows][k / 8] gets each row's RmsNorm(residual + x) * weight; s_w holds the norm's weight
// [k / 8], copied by cp.async before the caller's PDL wait (each thread waits for its own copies,
// the vectors it uses). CTA 0 stores the sums and the normalised rows. Thread t takes vectors t,
// t + kRmsNormVecThreads, ... and the sums of squares reduce by CtaSum over the CTA's warps, as in
// RmsNormVecKernel: the same bits. One vector at a time, so the prologue adds few registers to
// the streaming loop's.
// A CTA of kCtaThreads > kRmsNormVecThreads threads runs it too: the threads past the norm
// kernel's count take no vectors and add zeros to the sum, which leaves its bits as they are.
template <int kRows, int kCtaThreads = kRmsNormVecThreads>
__device__ __forceinline__ void StageNormedX(const GemvNorm& n, const void* x_base, int64_t ldx,
                                             int k, const uint4* s_w, uint4* s_x) {
  static_assert(kCtaThreads % kRmsNormVecThreads == 0, "whole norm-kernel splits");
  constexpr int kThreads = kRmsNormVecThreads;
  constexpr int kChunk = 8;  // bf16 per 16-byte vector
  __shared__ float scratch[kCtaThreads / kWarpSize];
  const int first = threadIdx.x < kThreads ? static_cast<int>(threadIdx.x) : k;  // k: none
  const int chunks = k / kChunk;
  const bool store = blockIdx.x == 0;
  const bool add = n.residual != nullptr;
  const auto row = [](const void* base, int64_t ld, int r) {
    return reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(base) + r * ld);
  };
  float sum_sq[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint4* x = row(x_base, ldx, r);
    const uint4* res = add ? row(n.residual, n.ld_residual, r) : nullptr;
    uint4* res_out = add ? const_cast<uint4*>(row(n.residual_out, n.ld_residual_out, r)) : nullptr;
    sum_sq[r] = 0.0f;
    for (int c = first; c < chunks; c += kThreads) {
      float v[kChunk];
      uint4 stored = x[c];
      if (add) {
        stored = AddResidualBf16x8(stored, res[c], v);
        if (store) res_out[c] = stored;
      } else {
        UnpackBf16x8(stored, v);
      }
      s_x[r * chunks + c] = stored;
      sum_sq[r] = AddSquares8(v, sum_sq[r]);
    }
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float inv = RmsInv(CtaSum<kCtaThreads / kWarpSize>(sum_sq[r], scratch), k, n.eps);
    uint4* normed = const_cast<uint4*>(row(n.normed, n.ld_normed, r));
    for (int c = first; c < chunks; c += kThreads) {
      float v[kChunk];
      UnpackBf16x8(s_x[r * chunks + c], v);  // this thread's own vector: no barrier needed
      const uint4 out = RmsScaleBf16x8(s_w[c], v, inv);
      s_x[r * chunks + c] = out;
      if (store) normed[c] = out;
    }
  }
}

}  // namespace xserv::kernels::cuda
