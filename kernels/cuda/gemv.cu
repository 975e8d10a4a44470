// Skinny GEMM (m <= 8 rows) for decode: bandwidth-bound on the weights, so the tile is built to
// keep many 16-byte weight loads in flight and to read each weight byte exactly once.
//
// Tile: a 256-thread CTA stages x [m, k] in shared memory (bf16), then each of its 8 warps takes
// groups of kCols output columns in a grid-stride loop over a grid that is resident at once. For
// a group the warp streams those rows of w, lane i reading 16-byte chunks i, i + 32, ... (8 bf16
// each, or 16 FP8 E4M3 codes whose block scale multiplies each load's partial sum), kUnroll
// chunks of every column per batch of loads, so each lane has kCols * kUnroll loads in flight.
// It keeps one fp32 partial per (column, x row); the partials are summed by a butterfly, so each
// output is reduced in a fixed order that depends only on k: the result for a row depends neither
// on m nor on the tile (kCols, kUnroll) (no atomics, no split-k).
//
// PDL (GemvArgs::pdl, pdl.cuh): the weights are constants, so a warp issues its first batch of
// weight loads before waiting for the kernel that produced x (and lets the next kernel launch).
//
// Norm prologue (GemvArgs::norm): instead of copying x, every CTA stages RmsNorm(residual + x) *
// weight, computed as the norm kernel computes it (rms_norm_vec.cuh): one kernel fewer ahead of
// each block's first projection, for a CTA barrier and a reduction that every CTA repeats.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_io.cuh"
#include "kernels/cuda/gemv_norm_prologue.cuh"
#include "kernels/cuda/l2_prefetch.cuh"
#include "kernels/cuda/l2_prefetch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rms_norm_vec.cuh"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kChunk = 8;  // bf16 per 16-byte load
static_assert(kThreads == kRmsNormVecThreads, "the norm prologue repeats the norm kernel's split");
// The default tiles' first batch of loads (4 per lane) covers kGemvPreloadBytes of a row.
static_assert(4 * kWarpSize * 16 == kGemvPreloadBytes, "l2_prefetch.h: the first loads");

// The 8 (bf16) or 16 (FP8 E4M3) weights of one 16-byte load as floats.
template <bool kFp8>
__device__ __forceinline__ void UnpackWeights(const uint4& raw, float* out) {
  if constexpr (kFp8) {
    Fp8Unpack16(raw, out);
  } else {
    UnpackBf16x8(raw, out);
  }
}

// kFp8: the weights are E4M3 codes with block scales (16 per 16-byte load); each load's partial
// dot product is scaled by its block's scale in fp32 before it joins the sum.
// kGlu (GemvArgs::glu): a group is one output column n0 < n / 2, made of the weight rows n0
// (gate) and n0 + n / 2 (up); kCols is 2. kNorm: GemvArgs::norm's prologue.
template <int kRows, int kCols, int kUnroll, bool kFp8, bool kGlu, bool kNorm>
__global__ void __launch_bounds__(kThreads) GemvKernel(const __grid_constant__ GemvArgs a) {
  static_assert(!kGlu || (kRows == 1 && kCols == 2 && !kFp8), "GLU: one bf16 row, a row pair");
  static_assert(!kNorm || (kFp8 && kRows == 1), "the norm prologue: one row, FP8 (gemv.h)");
  extern __shared__ uint4 s_x[];  // [kRows][k / 8] chunks of 8 bf16 (kNorm: + [k / 8])
  constexpr int kPerLoad = kFp8 ? 16 : kChunk;  // weights per 16-byte load
  constexpr int kGroupCols = kGlu ? 1 : kCols;  // output columns per group
  const int chunks = a.k / kPerLoad;
  const int lane = threadIdx.x % kWarpSize;
  const int out_cols = kGlu ? a.n / 2 : a.n;
  const int group_stride = gridDim.x * kWarps * kGroupCols;
  const int first_n0 = (blockIdx.x * kWarps + threadIdx.x / kWarpSize) * kGroupCols;
  const int64_t row_bytes = a.ldw * (kFp8 ? 1 : 2);
  // Weight row of column j of the group at n0.
  const auto row_of = [&](int n0, int j) { return kGlu ? n0 + j * (a.n / 2) : n0 + j; };

  uint4 wv[kUnroll][kCols];
  // Chunks c0, c0 + 32, ... (kUnroll of them) of columns n0 .. n0 + kCols - 1; columns past n
  // re-read the last row (in bounds; their sums are never stored), chunks past k read nothing.
  const auto load_batch = [&](int n0, int c0) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const uint4* w = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.w) +
                                                      min(row_of(n0, j), a.n - 1) * row_bytes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        wv[u][j] = c < chunks ? __ldcs(w + c) : make_uint4(0, 0, 0, 0);  // read once: not L2
      }
    }
  };
  // More of this warp's first rows may stream into L2 while the previous kernel runs (asked
  // first: fewer registers are live here than after the first batch).
  if (a.own_prefetch_bytes > 0 && lane < kCols && first_n0 < out_cols) {
    const int row = min(row_of(first_n0, lane), a.n - 1);
    PrefetchOwnRow(static_cast<const uint8_t*>(a.w) + row * row_bytes, chunks * 16,
                   int64_t{kUnroll} * kWarpSize * 16, a.own_prefetch_bytes,
                   int64_t{gridDim.x} * kWarps * kCols);
  }
  if (first_n0 < out_cols) load_batch(first_n0, lane);
  // The first group's bias too (a constant): loaded here it is not a round trip after the sums.
  // Not in the FP8 form, whose registers it would spill: there the bias loads after the sums.
  float first_bias[kCols] = {};
  if constexpr (!kFp8) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int n = row_of(first_n0, j);
      if (a.bias != nullptr && first_n0 < out_cols && n < a.n) {
        first_bias[j] = GemvBias(a, n);
      }
    }
  }
  const auto bias_of = [&](int n0, int j) {
    return !kFp8 && n0 == first_n0 ? first_bias[j] : GemvBias(a, row_of(n0, j));
  };
  const int x_chunks = a.k / kChunk;
  uint4* s_w = s_x + kRows * x_chunks;  // kNorm: the norm's weight [k / 8] after x
  if constexpr (kNorm) {  // a constant too
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
      CpAsync16(s_w + c, static_cast<const uint4*>(a.norm.weight) + c, 16);
    }
    CpAsyncCommit();
  }
  PdlBegin();  // x (and out, and the norm's residual) belong to the stream's earlier kernels

  if constexpr (kNorm) {
    StageNormedX<kRows>(a.norm, a.x, a.ldx, a.k, s_w, s_x);
  } else {
    for (int i = threadIdx.x; i < kRows * x_chunks; i += kThreads) {
      const int r = i / x_chunks, c = i % x_chunks;
      s_x[i] =
          reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + r * a.ldx)[c];
    }
  }
  __syncthreads();

  bool batch_loaded = true;
  for (int n0 = first_n0; n0 < out_cols; n0 += group_stride) {
    const float* scale_row[kCols];
    if constexpr (kFp8) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        scale_row[j] = a.scales + (min(n0 + j, a.n - 1) / a.block) * a.scale_cols;
      }
    }
    float acc[kCols][kRows] = {};
    for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnroll) {
      if (!batch_loaded) load_batch(n0, c0);
      batch_loaded = false;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        if (c >= chunks) break;
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
            UnpackBf16x8(s_x[r * x_chunks + c * (kPerLoad / kChunk) + h], xf + h * kChunk);
          }
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            float wf[kPerLoad];
            UnpackWeights<kFp8>(wv[u][j], wf);
            if constexpr (kFp8) {
              float part = 0.0f;
#pragma unroll
              for (int i = 0; i < kPerLoad; ++i) part = fmaf(wf[i], xf[i], part);
              acc[j][r] = fmaf(part, scale[j], acc[j][r]);
            } else {
#pragma unroll
              for (int i = 0; i < kPerLoad; ++i) acc[j][r] = fmaf(wf[i], xf[i], acc[j][r]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[j][r] = WarpSum(acc[j][r]);
    }
    if constexpr (kGlu) {
      // The gate and up values rounded as the plain GEMV's bf16 output, then SiluMul's op.
      if (lane == 0) {
        float gu[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float v = acc[j][0];
          if (a.bias != nullptr) v += bias_of(n0, j);
          gu[j] = __bfloat162float(__float2bfloat16_rn(v));
        }
        static_cast<__nv_bfloat16*>(a.out)[n0] = __float2bfloat16_rn(SiluMulOp{}(gu[0], gu[1]));
      }
      continue;
    }
    // Lane j * kRows + r stores column n0 + j of row r.
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int n = n0 + j;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (lane != (j * kRows + r) % kWarpSize || n >= a.n) continue;
        float v = acc[j][r];
        if (a.bias != nullptr) v += bias_of(n0, j);
        GemvStore(a, r, n, v);
      }
    }
  }
  // This warp's loads are done: the next matmul's weight may stream now (l2_prefetch.h).
  IssueL2Prefetch(a.prefetch, blockIdx.x * kThreads + threadIdx.x, gridDim.x * kThreads);
}

template <int kRows, int kCols, int kUnroll, bool kFp8, bool kGlu, bool kNorm = false>
cudaError_t LaunchWith(const GemvArgs& a, cudaStream_t stream) {
  constexpr auto kernel = GemvKernel<kRows, kCols, kUnroll, kFp8, kGlu, kNorm>;
  const size_t smem = static_cast<size_t>(kRows + (kNorm ? 1 : 0)) * a.k * 2;
  if (const cudaError_t err = AllowDynamicSharedMemory<kernel>(kGemvMaxSharedBytes);
      err != cudaSuccess) {
    return err;
  }
  // Every CTA resident at once (the grid-stride loop takes the rest), each warp with at least
  // one column group. The occupancy depends on smem (x's size).
  int per_sm = 0;
  if (const cudaError_t err = ResidentPerSm<kernel>(kThreads, smem, &per_sm);
      err != cudaSuccess) {
    return err;
  }
  if (a.max_ctas_per_sm > 0) per_sm = std::min(per_sm, a.max_ctas_per_sm);
  constexpr int kGroupCols = kGlu ? 1 : kCols;
  const int64_t needed = ((kGlu ? a.n / 2 : a.n) + kWarps * kGroupCols - 1) / (kWarps * kGroupCols);
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * SmCount();
  const unsigned grid = static_cast<unsigned>(std::min(needed, resident));
  return LaunchMaybePdl(kernel, dim3(grid), dim3(kThreads), smem, stream, a.pdl, a);
}

// The tiles a launch may take: kCols columns per warp, kUnroll loads of each in flight.
template <int kRows, bool kFp8, bool kGlu = false>
cudaError_t LaunchTile(const GemvArgs& a, int cols, int unroll, cudaStream_t stream) {
  if constexpr (kGlu) {  // the row pair of one output column
    if (cols == 2 && unroll == 2) return LaunchWith<kRows, 2, 2, kFp8, kGlu>(a, stream);
    if (cols == 2 && unroll == 4) return LaunchWith<kRows, 2, 4, kFp8, kGlu>(a, stream);
    return cudaErrorInvalidValue;
  } else {
    if (cols == 1 && unroll == 4) return LaunchWith<kRows, 1, 4, kFp8, false>(a, stream);
    if (cols == 1 && unroll == 8) return LaunchWith<kRows, 1, 8, kFp8, false>(a, stream);
    if (cols == 2 && unroll == 4) return LaunchWith<kRows, 2, 4, kFp8, false>(a, stream);
    if (cols == 4 && unroll == 2) return LaunchWith<kRows, 4, 2, kFp8, false>(a, stream);
    if (cols == 4 && unroll == 4) return LaunchWith<kRows, 4, 4, kFp8, false>(a, stream);
    return cudaErrorInvalidValue;
  }
}

template <int kRows, bool kFp8, bool kGlu = false>
cudaError_t Launch(const GemvArgs& a, cudaStream_t stream) {
  // Measured on an H200 over Qwen3-8B and gpt-oss-20b projections (xserv-gemv-bench,
  // docs/benchmarks/README.md): one bf16 row streams best with one column per warp and four
  // loads in flight (more loads per lane cost occupancy), FP8 rows and several bf16 rows with
  // two columns per warp (x's shared-memory reads and the conversions are shared by both).
  // A GLU output column reads two rows (2x4 measured ahead of 2x2).
  constexpr bool kOneColumn = kRows == 1 && !kFp8 && !kGlu;
  const int cols = a.tile_cols != 0 ? a.tile_cols : (kOneColumn ? 1 : 2);
  const int unroll = a.tile_unroll != 0 ? a.tile_unroll : 4;
  if constexpr (kFp8 && kRows == 1) {
    if (a.norm.weight != nullptr) {  // the default tile only: fewer kernels to build
      if (cols != 2 || unroll != 4) return cudaErrorInvalidValue;
      return LaunchWith<kRows, 2, 4, kFp8, false, true>(a, stream);
    }
  }
  if (a.norm.weight != nullptr) return cudaErrorInvalidValue;  // never a GEMV without its norm
  return LaunchTile<kRows, kFp8, kGlu>(a, cols, unroll, stream);
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
  const bool glu_ok = !a.glu || (a.m == 1 && a.scales == nullptr && a.n % 2 == 0 &&
                                 a.out_type == ElemType::kBF16);
  const GemvNorm& norm = a.norm;
  const bool norm_ok =
      norm.weight == nullptr ||
      (a.scales != nullptr && a.m == 1 && RmsNormTakesVectors(a.k) &&
       (a.m + int64_t{1}) * a.k * 2 <= kGemvMaxSharedBytes && norm.normed != nullptr &&
       (norm.residual == nullptr) == (norm.residual_out == nullptr) && aligned(norm.weight) &&
       aligned(norm.residual) && aligned(norm.residual_out) && aligned(norm.normed) &&
       norm.ld_residual % kChunk == 0 && norm.ld_residual_out % kChunk == 0 &&
       norm.ld_normed % kChunk == 0);
  // n bounded well inside int: the grid-stride loop adds a stride to a column index.
  return fp8_ok && glu_ok && norm_ok && a.m >= 1 && a.m <= kGemvMaxRows && a.n >= 1 &&
         a.n <= (1 << 30) &&
         a.k >= kChunk && a.k % kChunk == 0 &&
         a.ldx % kChunk == 0 && a.ldw % kChunk == 0 && aligned(a.x) && aligned(a.w) &&
         static_cast<int64_t>(a.m) * a.k * 2 <= kGemvMaxSharedBytes && GemvIoTypesSupported(a);
}

cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  if (a.norm.weight != nullptr && !GemvSupports(a)) return cudaErrorInvalidValue;
  if (a.glu) {
    return GemvSupports(a) ? Launch<1, false, true>(a, stream) : cudaErrorInvalidValue;
  }
  return a.scales != nullptr ? LaunchRows<true>(a, stream) : LaunchRows<false>(a, stream);
}

}  // namespace xserv::kernels::cuda
