// Skinny GEMM (m <= 8 rows) for decode: bandwidth-bound on the weights, so the tile is built to
// keep many 16-byte weight loads in flight and to read each weight byte exactly once.
//
// Tile: a 256-thread CTA stages x [m, k] in shared memory (bf16), then each of its 8 warps takes
// groups of kCols output columns (1, 2 or 4: as many as leave every SM 16 warps) in a grid-stride
// loop; for a group the warp streams those rows of w, lane i reading 16-byte chunks i, i + 32, ...
// (8 bf16 each, or 16 FP8 E4M3 codes whose block scale multiplies each load's partial sum), and
// keeps one fp32 partial per (column, x row). The partials are summed by a butterfly, so each output is reduced in a fixed
// order that depends only on k: the result for a row does not depend on m (no atomics, no
// split-k).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kChunk = 8;  // bf16 per 16-byte load

__device__ __forceinline__ float Load(const void* p, ElemType type, int64_t i) {
  return type == ElemType::kF32 ? static_cast<const float*>(p)[i]
                                : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// kFp8: the weights are E4M3 codes with block scales (16 per 16-byte load); each load's partial
// dot product is scaled by its block's scale in fp32 before it joins the sum.
template <int kRows, int kCols, bool kFp8>
__global__ void __launch_bounds__(kThreads) GemvKernel(const __grid_constant__ GemvArgs a) {
  extern __shared__ uint4 s_x[];  // [kRows][k / 8] chunks of 8 bf16
  const int x_chunks = a.k / kChunk;
  for (int i = threadIdx.x; i < kRows * x_chunks; i += kThreads) {
    const int r = i / x_chunks, c = i % x_chunks;
    s_x[i] = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + r * a.ldx)[c];
  }
  __syncthreads();
  constexpr int kPerLoad = kFp8 ? 16 : kChunk;  // weights per 16-byte load
  const int chunks = a.k / kPerLoad;
  const int lane = threadIdx.x % kWarpSize;
  const int total_warps = gridDim.x * kWarps;
  for (int n0 = (blockIdx.x * kWarps + threadIdx.x / kWarpSize) * kCols; n0 < a.n;
       n0 += total_warps * kCols) {
    const uint4* w[kCols];
    const float* scale_row[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      // Columns past n re-read the last row (in bounds); their sums are never stored.
      const int n = min(n0 + j, a.n - 1);
      w[j] = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.w) +
                                            static_cast<int64_t>(n) * a.ldw * (kFp8 ? 1 : 2));
      if constexpr (kFp8) scale_row[j] = a.scales + (n / a.block) * a.scale_cols;
    }
    float acc[kCols][kRows] = {};
#pragma unroll 2
    for (int c = lane; c < chunks; c += kWarpSize) {
      uint4 wv[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) wv[j] = __ldcs(w[j] + c);  // read once: keep out of L2
      float wf[kCols][kPerLoad];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if constexpr (kFp8) {
          const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&wv[j]);
#pragma unroll
          for (int i = 0; i < kPerLoad / 2; ++i) {
            const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
            wf[j][2 * i] = f.x;
            wf[j][2 * i + 1] = f.y;
          }
        } else {
          const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv[j]);
#pragma unroll
          for (int i = 0; i < kPerLoad / 2; ++i) {
            const float2 f = __bfloat1622float2(wp[i]);
            wf[j][2 * i] = f.x;
            wf[j][2 * i + 1] = f.y;
          }
        }
      }
      float scale[kCols];
      if constexpr (kFp8) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) scale[j] = __ldg(scale_row[j] + c * kPerLoad / a.block);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xf[kPerLoad];
#pragma unroll
        for (int h = 0; h < kPerLoad / kChunk; ++h) {
          const uint4 xv = s_x[r * x_chunks + c * (kPerLoad / kChunk) + h];
          const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f = __bfloat1622float2(xp[i]);
            xf[h * kChunk + 2 * i] = f.x;
            xf[h * kChunk + 2 * i + 1] = f.y;
          }
        }
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if constexpr (kFp8) {
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < kPerLoad; ++i) part = fmaf(wf[j][i], xf[i], part);
            acc[j][r] = fmaf(part, scale[j], acc[j][r]);
          } else {
#pragma unroll
            for (int i = 0; i < kPerLoad; ++i) acc[j][r] = fmaf(wf[j][i], xf[i], acc[j][r]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[j][r] = WarpSum(acc[j][r]);
    }
    // Lane j * kRows + r stores column n0 + j of row r.
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int n = n0 + j;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (lane != j * kRows + r % kWarpSize || n >= a.n) continue;
        float v = acc[j][r];
        if (a.bias != nullptr) v += Load(a.bias, a.bias_type, n);
        const int64_t o = static_cast<int64_t>(r) * a.ldo + n;
        if (a.out_type == ElemType::kF32) {
          static_cast<float*>(a.out)[o] = v;
        } else {
          static_cast<__nv_bfloat16*>(a.out)[o] = __float2bfloat16_rn(v);
        }
      }
    }
  }
}

template <int kRows, int kCols, bool kFp8>
cudaError_t LaunchWith(const GemvArgs& a, int sms, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(kRows) * a.k * 2;
  if (const cudaError_t err =
          AllowDynamicSharedMemory<GemvKernel<kRows, kCols, kFp8>>(kGemvMaxSharedBytes);
      err != cudaSuccess) {
    return err;
  }
  // Enough warps to cover every column group once, capped at a few CTAs per SM (each stages x).
  const int64_t needed = (a.n + kWarps * kCols - 1) / (kWarps * kCols);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(needed, 4LL * sms));
  GemvKernel<kRows, kCols, kFp8><<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <int kRows, bool kFp8>
cudaError_t Launch(const GemvArgs& a, cudaStream_t stream) {
  static const int sms = [] {  // one device per process
    int device = 0, count = 132;
    if (cudaGetDevice(&device) == cudaSuccess) {
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    }
    return count;
  }();
  // More columns per warp read x from shared memory fewer times per weight byte, but leave fewer
  // warps to hide latency: take the most that still gives every SM 16 warps. Each output's
  // reduction order is the same whatever the choice.
  const int64_t warps_wanted = 16LL * sms;
  if (a.n >= 4 * warps_wanted) return LaunchWith<kRows, 4, kFp8>(a, sms, stream);
  if (a.n >= 2 * warps_wanted) return LaunchWith<kRows, 2, kFp8>(a, sms, stream);
  return LaunchWith<kRows, 1, kFp8>(a, sms, stream);
}

template <bool kFp8>
cudaError_t LaunchRows(const GemvArgs& a, cudaStream_t stream) {
  switch (a.m) {
    case 1: return Launch<1, kFp8>(a, stream);
    case 2: return Launch<2, kFp8>(a, stream);
    case 3: return Launch<3, kFp8>(a, stream);
    case 4: return Launch<4, kFp8>(a, stream);
    case 5: return Launch<5, kFp8>(a, stream);
    case 6: return Launch<6, kFp8>(a, stream);
    case 7: return Launch<7, kFp8>(a, stream);
    case 8: return Launch<8, kFp8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool GemvSupports(const GemvArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool fp8_ok = a.scales == nullptr ||
                      (a.k % 16 == 0 && a.block >= 16 && a.block % 16 == 0 && a.ldw % 16 == 0);
  return fp8_ok && a.m >= 1 && a.m <= kGemvMaxRows && a.n >= 1 && a.k >= kChunk && a.k % kChunk == 0 &&
         a.ldx % kChunk == 0 && a.ldw % kChunk == 0 && aligned(a.x) && aligned(a.w) &&
         static_cast<int64_t>(a.m) * a.k * 2 <= kGemvMaxSharedBytes &&
         (a.out_type == ElemType::kF32 || a.out_type == ElemType::kBF16) &&
         (a.bias == nullptr || a.bias_type == ElemType::kF32 || a.bias_type == ElemType::kBF16);
}

cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  return a.scales != nullptr ? LaunchRows<true>(a, stream) : LaunchRows<false>(a, stream);
}

}  // namespace xserv::kernels::cuda
