// The persistent decode-step skeleton (persistent_step.h).
//
// Every resident CTA runs every phase. A phase's rows go to the grid's warps in pairs (warp g
// takes rows 2g, 2g + 1, then 2g + 2 * warps, ...), each pair streamed as the FP8 2x4 GEMV tile
// streams it (gemv.cu): lane i reads 16-byte chunks i, i + 32, ..., 4 per row in flight, one fp32
// partial per 16 codes scaled by its block, a butterfly sum, bf16 out. Between phases a grid
// barrier (an arrival counter that only grows; phase p waits for (p + 1) * CTAs arrivals), after
// which each CTA stages the next phase's x in shared memory. With prefetch, a warp issues the
// first batch of its next phase's rows before it arrives: the weights are constants, so, like a
// PDL launch's loads before griddepcontrol.wait, they stream while the barrier waits.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/tools/persistent_common.cuh"
#include "kernels/cuda/tools/persistent_step.h"

namespace xserv::kernels::cuda::bench {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kCols = 2;    // rows per warp group
constexpr int kUnroll = 4;  // 16-byte loads per row in flight per lane
constexpr int kCodes = 16;  // E4M3 codes per load
constexpr int kBlock = 128;

__global__ void __launch_bounds__(kThreads)
    PersistentStepKernel(const __grid_constant__ PersistentStepArgs s) {
  extern __shared__ uint4 s_x[];  // [k / 8] chunks of 8 bf16
  const int lane = threadIdx.x % kWarpSize;
  const int first_n0 = (blockIdx.x * kWarps + threadIdx.x / kWarpSize) * kCols;
  const int row_stride = gridDim.x * kWarps * kCols;
  uint4 wv[kUnroll][kCols];
  const auto load_batch = [&](const StreamPhase& p, int n0, int c0) {
    const int chunks = p.k / kCodes;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const uint4* w = reinterpret_cast<const uint4*>(p.w + int64_t{min(n0 + j, p.n - 1)} * p.k);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        wv[u][j] = c < chunks ? __ldcs(w + c) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  bool batch_loaded = false;
  if (s.prefetch && s.phases[0].w != nullptr && first_n0 < s.phases[0].n) {
    load_batch(s.phases[0], first_n0, lane);
    batch_loaded = true;
  }
  for (int i = 0; i < s.num_phases; ++i) {
    const StreamPhase p = s.phases[i];
    if (p.w == nullptr) {
      RunLatencyPhase<kThreads>(p);
    } else {
      const int x_chunks = p.k / 8, chunks = p.k / kCodes;
      for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
        s_x[c] = static_cast<const uint4*>(p.x)[c];
      }
      __syncthreads();
      const int scale_cols = (p.k + kBlock - 1) / kBlock;
      for (int n0 = first_n0; n0 < p.n; n0 += row_stride) {
        const float* scale_row[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          scale_row[j] = p.scales + (min(n0 + j, p.n - 1) / kBlock) * scale_cols;
        }
        float acc[kCols] = {};
        for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnroll) {
          if (!batch_loaded) load_batch(p, n0, c0);
          batch_loaded = false;
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + u * kWarpSize;
            if (c >= chunks) break;
            float xf[kCodes];
            UnpackBf16x8(s_x[2 * c], xf);
            UnpackBf16x8(s_x[2 * c + 1], xf + 8);
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
              const float scale = __ldg(scale_row[j] + c * kCodes / kBlock);
              acc[j] = fmaf(Fp8Dot16(wv[u][j], xf), scale, acc[j]);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          const float sum = WarpSum(acc[j]);
          if (lane == j && n0 + j < p.n) {
            static_cast<__nv_bfloat16*>(p.out)[n0 + j] = __float2bfloat16_rn(sum);
          }
        }
      }
    }
    if (i + 1 == s.num_phases) break;
    const StreamPhase next = s.phases[i + 1];
    if (s.prefetch && next.w != nullptr && first_n0 < next.n) {
      load_batch(next, first_n0, lane);
      batch_loaded = true;
    }
    if (s.barriers) GridBarrier(s.barrier, static_cast<unsigned>(i + 1) * gridDim.x);
  }
}

__global__ void CopyPhaseKernel(const __grid_constant__ StreamPhase p) {
  PdlBegin();
  RunLatencyPhase<kThreads>(p);  // one CTA
}

}  // namespace

cudaError_t LaunchPersistentStep(const PersistentStepArgs& args, int max_k, cudaStream_t stream) {
  if (args.ring_w8a8) return LaunchPersistentRingW8A8(args, max_k, stream);
  if (args.smem_ring) return LaunchPersistentRing(args, max_k, stream);
  return LaunchOnEveryResidentCta<PersistentStepKernel>(args, kThreads,
                                                        static_cast<size_t>(max_k) * 2, stream);
}

cudaError_t LaunchCopyPhase(const StreamPhase& phase, cudaStream_t stream) {
  return LaunchMaybePdl(CopyPhaseKernel, dim3(1), dim3(kThreads), 0, stream, true, phase);
}

}  // namespace xserv::kernels::cuda::bench
