// FP8-weight skinny GEMM on tensor cores for decode (fp8_gemv_mma.h).
//
// Tile: a CTA of 8 warps owns 16 weight rows (the M of mma.sync m16n8k16) over all of k; x's m rows
// are the N (column g of B is x row g; columns past m repeat row m - 1 and are never stored). The
// grid is resident at once, each CTA staging x once and taking tiles blockIdx.x, blockIdx.x +
// gridDim.x, ... The warps split k into steps of 64 inputs, warp w taking steps w, w + 8, ... with
// kUnroll steps in flight. In a step, thread (g, q) loads 16 codes (16 bytes) of rows g and g + 8
// at the step's inputs 16q .. 16q + 15 and turns each 4-byte word t into the A fragment of MMA t:
// its K slots (2q, 2q + 1) and (2q + 8, 2q + 9) are the step's inputs 16q + 4t + {0, 2} and 16q +
// 4t + {1, 3}: bf16 codes by shifts (Fp8CodesToBf16x2 takes a word's bytes 0 and 2, and bytes 1 and
// 3 once shifted down; exact, no conversion instruction). B takes x in the same order: x is staged
// in shared memory as bf16 with each group of four inputs stored as (0, 2, 1, 3), so thread (g, q)
// reads inputs 16q .. 16q + 15 of x row g (two 16-byte loads) as the B registers of the step's 4
// MMAs. A step's MMAs accumulate into a fresh f32 tile, which its weight block's scale then adds to
// the sum (a step lies in one block: k and the block size are multiples of 64). bf16 x needs no
// scaling (f16 x did: a row maximum, a conversion pass and three barriers, which cost single-row
// steps). The warps' sums meet in shared memory in warp order: each output's reduction order
// depends only on k, not on m or the other rows.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/fp8_gemv_mma.h"
#include "kernels/cuda/gemv_io.cuh"
#include "kernels/cuda/l2_prefetch.cuh"
#include "kernels/cuda/l2_prefetch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace xserv::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kTileRows = 16;          // the MMA's M
constexpr int kMaxRows = kGemvMaxRows;  // x rows: the MMA's N (8)
constexpr int kStep = 64;              // inputs per step: 16 per thread of a quad
constexpr int kUnroll = 4;             // steps in flight per warp
static_assert(kMaxRows == 8, "x rows are the N of m16n8k16");
static_assert(kUnroll * kWarps * kStep == kGemvPreloadBytes, "l2_prefetch.h: the first loads");

// 8 bf16 inputs with each group of four (0, 1, 2, 3) reordered (0, 2, 1, 3): the B fragment's
// order of the step's K slots (above).
__device__ __forceinline__ uint4 InB16Order(const uint4& v) {
  return make_uint4(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.x, v.y, 0x7632),
                    __byte_perm(v.z, v.w, 0x5410), __byte_perm(v.z, v.w, 0x7632));
}

__global__ void __launch_bounds__(kThreads) Fp8MmaGemvKernel(const __grid_constant__ GemvArgs a) {
  extern __shared__ uint4 xs[];  // [m][k / 8]: bf16 in the B order (InB16Order)
  __shared__ float partial[kWarps][kTileRows][kMaxRows];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int steps = a.k / kStep;
  const int tiles = (a.n + kTileRows - 1) / kTileRows;

  // The weights first: constants, so their loads may overlap the previous kernel (PDL).
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const uint4* rows[2];
  const auto rows_of = [&](int n0) {
    rows[0] = reinterpret_cast<const uint4*>(codes + int64_t{min(n0 + g, a.n - 1)} * a.ldw);
    rows[1] = reinterpret_cast<const uint4*>(codes + int64_t{min(n0 + g + 8, a.n - 1)} * a.ldw);
  };
  rows_of(blockIdx.x * kTileRows);
  uint4 w[kUnroll][2];
  const auto load = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u * kWarps;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        w[u][r] = s < steps ? __ldcs(rows[r] + s * (kStep / 16) + q) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  load(warp);
  // More of the tile's rows may stream into L2 while the previous kernel runs (warp 0's quads'
  // first threads: rows g and g + 8).
  if (a.own_prefetch_bytes > 0 && warp == 0 && q == 0) {
    for (const uint4* row : rows) {
      PrefetchOwnRow(row, a.k, kGemvPreloadBytes, a.own_prefetch_bytes,
                     int64_t{gridDim.x} * kTileRows);
    }
  }
  PdlBegin();  // x (and out) belong to the stream's earlier kernels

  // x into shared memory in the B order.
  const int chunks = a.k / 8;
  for (int r = 0; r < a.m; ++r) {
    const uint4* x_row = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) +
                                                        static_cast<int64_t>(r) * a.ldx);
    for (int c = threadIdx.x; c < chunks; c += kThreads) xs[r * chunks + c] = InB16Order(x_row[c]);
  }
  __syncthreads();

  const uint4* x_row = xs + min(g, a.m - 1) * chunks;
  // The CTAs are resident at once and take the row tiles in turn (x staged once per CTA).
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int n0 = tile * kTileRows;
    if (tile != blockIdx.x) {
      rows_of(n0);
      load(warp);
    }
    const float* block_scales = a.scales + static_cast<int64_t>(n0 / a.block) * a.scale_cols;
    float acc[4] = {};
    for (int s0 = warp; s0 < steps; s0 += kWarps * kUnroll) {
      if (s0 != warp) load(s0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int s = s0 + u * kWarps;
        if (s >= steps) break;  // uniform across the warp
        const uint4 xa = x_row[s * (kStep / 8) + 2 * q], xb = x_row[s * (kStep / 8) + 2 * q + 1];
        const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
        const uint32_t lo[4] = {w[u][0].x, w[u][0].y, w[u][0].z, w[u][0].w};  // row g
        const uint32_t hi[4] = {w[u][1].x, w[u][1].y, w[u][1].z, w[u][1].w};  // row g + 8
        float step_sum[4] = {};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          MmaBf16(step_sum,
                  {Fp8CodesToBf16x2(lo[t]), Fp8CodesToBf16x2(hi[t]), Fp8CodesToBf16x2(lo[t] >> 8),
                   Fp8CodesToBf16x2(hi[t] >> 8)},
                  xw[2 * t], xw[2 * t + 1]);
        }
        const float scale = __ldg(block_scales + s * kStep / a.block);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = fmaf(step_sum[i], scale, acc[i]);
      }
    }
    // C: acc[0..1] rows g, x rows 2q and 2q + 1; acc[2..3] the same of row g + 8.
    partial[warp][g][2 * q] = acc[0];
    partial[warp][g][2 * q + 1] = acc[1];
    partial[warp][g + 8][2 * q] = acc[2];
    partial[warp][g + 8][2 * q + 1] = acc[3];
    __syncthreads();
    const int i = threadIdx.x / kMaxRows, r = threadIdx.x % kMaxRows, n = n0 + i;
    if (threadIdx.x < kTileRows * kMaxRows && r < a.m && n < a.n) {
      float sum = 0.0f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) sum += partial[v][i][r];
      float out = sum;
      if (a.bias != nullptr) out += GemvBias(a, n);
      GemvStore(a, r, n, out);
    }
    __syncthreads();  // partial is the next tile's
  }
  // This CTA's loads are done: the next matmul's weight may stream now (l2_prefetch.h).
  IssueL2Prefetch(a.prefetch, blockIdx.x * kThreads + threadIdx.x, gridDim.x * kThreads);
}

}  // namespace

bool Fp8MmaGemvSupports(const GemvArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.scales != nullptr && !a.glu && a.block >= kStep && a.block % kStep == 0 &&
         a.k >= kStep && a.k % kStep == 0 && a.m >= 1 && a.m <= kMaxRows && a.n >= 1 &&
         a.ldx % 8 == 0 && a.ldw % 16 == 0 && aligned(a.x) && aligned(a.w) &&
         int64_t{a.m} * a.k * 2 <= kFp8MmaGemvMaxSharedBytes && GemvIoTypesSupported(a);
}

cudaError_t LaunchFp8MmaGemv(const GemvArgs& a, cudaStream_t stream) {
  if (!Fp8MmaGemvSupports(a)) return cudaErrorInvalidValue;
  // What this call needs (a device with less shared memory than an H200 still takes small x).
  const size_t smem = static_cast<size_t>(a.m) * a.k * 2;
  const auto bytes = static_cast<int64_t>(smem);
  if (const cudaError_t err = AllowDynamicSharedMemory<Fp8MmaGemvKernel>(bytes);
      err != cudaSuccess) {
    return err;
  }
  int per_sm = 0;
  if (const cudaError_t err = ResidentPerSm<Fp8MmaGemvKernel>(kThreads, smem, &per_sm);
      err != cudaSuccess) {
    return err;
  }
  const int64_t tiles = (a.n + kTileRows - 1) / kTileRows;
  const int64_t resident = int64_t{std::max(per_sm, 1)} * SmCount();
  const auto grid = static_cast<unsigned>(std::min(tiles, resident));
  return LaunchMaybePdl(Fp8MmaGemvKernel, dim3(grid), dim3(kThreads), smem, stream, a.pdl, a);
}

}  // namespace xserv::kernels::cuda
