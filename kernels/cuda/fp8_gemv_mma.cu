// FP8-weight skinny GEMM on tensor cores for decode (fp8_gemv_mma.h).
//
// Tile: a CTA of 8 warps owns 16 weight rows (the M of mma.sync m16n8k16) over all of k; x's m
// rows are the N (column g of B is x row g; columns past m repeat row m - 1 and are never
// stored). The warps split k into steps of 64 inputs, warp w taking steps w, w + 8, ... with
// kUnroll steps in flight. In a step, thread (g, q) loads 16 codes (16 bytes) of rows g and
// g + 8 at the step's inputs 16q .. 16q + 15 and turns each 4-byte word t into the A fragment of
// MMA t (cvt e4m3x2 -> f16x2, exact): MMA t's K slots (2q, 2q + 1) and (2q + 8, 2q + 9) are the
// step's inputs 16q + 4t + {0, 1} and 16q + 4t + {2, 3}. B takes x in the same order: thread
// (g, q) reads inputs 16q .. 16q + 15 of x row g from shared memory (two 16-byte loads). A step's
// 4 MMAs accumulate into a fresh f32 tile, which its weight block's scale then adds to the sum
// (a step lies in one block: k and the block size are multiples of 64).
//
// x as f16: each row is scaled by a power of two that puts its largest magnitude in
// [2^14, 2^15), exact for bf16 inputs down to 2^-28 of the largest (f16 overflows at 65504), and
// the outputs are scaled back. The warps' sums meet in shared memory in warp order: each
// output's reduction order depends only on k, not on m or the other rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// 2^s as an f32, s in [-126, 127].
__device__ __forceinline__ float Pow2(int s) { return __int_as_float((127 + s) << 23); }

// The power of two s that puts a row's largest magnitude (an f32's bits) times 2^-s in
// [2^14, 2^15), at least -126 (rows below 2^-112 keep fewer bits). 0 for a row that is zero or
// wholly subnormal (it becomes zeros), or holds an infinity (its finite values above 65504 then
// become infinities too) or only NaN.
__device__ __forceinline__ int ShiftOf(uint32_t amax_bits) {
  const int e = static_cast<int>(amax_bits >> 23);
  if (e == 0 || e == 255) return 0;
  return max(e - 127 - 14, -126);
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__global__ void __launch_bounds__(kThreads) Fp8MmaGemvKernel(const __grid_constant__ GemvArgs a) {
  extern __shared__ uint4 xs[];  // [m][k / 8]: bf16 as loaded, then f16 scaled by 2^-shift
  __shared__ float partial[kWarps][kTileRows][kMaxRows];
  __shared__ uint32_t amax_bits[kMaxRows];
  __shared__ int shift[kMaxRows];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * kTileRows;
  const int steps = a.k / kStep;

  // The weights first: constants, so their loads may overlap the previous kernel (PDL).
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const uint4* rows[2] = {
      reinterpret_cast<const uint4*>(codes + static_cast<int64_t>(min(n0 + g, a.n - 1)) * a.ldw),
      reinterpret_cast<const uint4*>(codes +
                                     static_cast<int64_t>(min(n0 + g + 8, a.n - 1)) * a.ldw)};
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
  if (threadIdx.x < kMaxRows) amax_bits[threadIdx.x] = 0;
  PdlBegin();  // x (and out) belong to the stream's earlier kernels
  __syncthreads();

  // x into shared memory with each row's largest magnitude (NaN is skipped; it stays NaN).
  const int chunks = a.k / 8;
  for (int r = 0; r < a.m; ++r) {
    const uint4* x_row = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) +
                                                        static_cast<int64_t>(r) * a.ldx);
    float largest = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      const uint4 raw = x_row[c];
      xs[r * chunks + c] = raw;
      float v[8];
      UnpackBf16x8(raw, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) largest = fmaxf(largest, fabsf(v[i]));
    }
    largest = WarpMax(largest);
    if (lane == 0) atomicMax(&amax_bits[r], __float_as_uint(largest));
  }
  __syncthreads();
  if (threadIdx.x < a.m) shift[threadIdx.x] = ShiftOf(amax_bits[threadIdx.x]);
  __syncthreads();
  // Each thread converts the chunks it loaded.
  for (int r = 0; r < a.m; ++r) {
    const float f = Pow2(-shift[r]);
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      float v[8];
      UnpackBf16x8(xs[r * chunks + c], v);
      xs[r * chunks + c] = make_uint4(PackHalf2(v[0] * f, v[1] * f), PackHalf2(v[2] * f, v[3] * f),
                                      PackHalf2(v[4] * f, v[5] * f), PackHalf2(v[6] * f, v[7] * f));
    }
  }
  __syncthreads();

  const uint4* x_row = xs + min(g, a.m - 1) * chunks;
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
        MmaF16(step_sum,
               {Fp8PairHalf2Bits(lo[t] & 0xFFFFu), Fp8PairHalf2Bits(hi[t] & 0xFFFFu),
                Fp8PairHalf2Bits(lo[t] >> 16), Fp8PairHalf2Bits(hi[t] >> 16)},
               xw[2 * t], xw[2 * t + 1]);
      }
      const float scale = __ldg(block_scales + s * kStep / a.block);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = fmaf(step_sum[i], scale, acc[i]);
    }
  }
  // This warp's loads are done: the next matmul's weight may stream now (l2_prefetch.h).
  IssueL2Prefetch(a.prefetch, blockIdx.x * kThreads + threadIdx.x, gridDim.x * kThreads);
  // C: acc[0..1] rows g, x rows 2q and 2q + 1; acc[2..3] the same of row g + 8.
  partial[warp][g][2 * q] = acc[0];
  partial[warp][g][2 * q + 1] = acc[1];
  partial[warp][g + 8][2 * q] = acc[2];
  partial[warp][g + 8][2 * q + 1] = acc[3];
  __syncthreads();
  if (threadIdx.x >= kTileRows * kMaxRows) return;
  const int i = threadIdx.x / kMaxRows, r = threadIdx.x % kMaxRows, n = n0 + i;
  if (r >= a.m || n >= a.n) return;
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kWarps; ++v) sum += partial[v][i][r];
  float out = sum * Pow2(shift[r]);
  if (a.bias != nullptr) out += GemvBias(a, n);
  GemvStore(a, r, n, out);
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
  const unsigned grid = static_cast<unsigned>((a.n + kTileRows - 1) / kTileRows);
  return LaunchMaybePdl(Fp8MmaGemvKernel, dim3(grid), dim3(kThreads), smem, stream, a.pdl, a);
}

}  // namespace xserv::kernels::cuda
