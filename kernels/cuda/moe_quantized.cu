// Mixture of experts over quantised expert weights (MXFP4 or FP8, moe_quantized.h) on tensor
// cores: routing alignment, a grouped GEMM and a few-token GEMV that both decode the expert
// weights in registers, and the weighted combine. See moe_quantized.h for the data flow.
//
// Decoding (moe_weight_formats.cuh): a thread loads one 32-input group of one weight row (16
// bytes of MXFP4, 32 of FP8) and turns it into 16 bf16 pairs with integer ops and bf16x2
// multiplies, exact (MXFP4: power-of-two scales) or rounding once as a bf16 copy of the weight
// would (FP8), so the tensor cores see exactly the bf16 weights the CPU backend and a dense copy
// compute with. The pairs are not
// adjacent inputs but (8v + j, 8v + j + 4) (the cheapest to decode from MXFP4's nibbles; FP8
// follows the same order so that one staging serves both); the activations are staged in shared
// memory in the same order (StageUnit, StageGroupMajorRow), so the dot products are unchanged.
// For mma.sync m16n8k16, the K of one MMA covers 4 groups, one per thread q = lane % 4 of a quad:
// slots 2q, 2q + 1 hold pair 2i of group q's 16, slots 2q + 8, 2q + 9 pair 2i + 1, for MMA step
// i = 0..7 of a chunk of 4 groups. Each thread reads distinct bytes of the weights (a row's 4
// threads 64 or 128 contiguous bytes). fp32 accumulation in a fixed K order.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_combine.cuh"
#include "kernels/cuda/moe_quantized.h"
#include "kernels/cuda/moe_weight_formats.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pdl.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
using moe::Fp8Format;
using moe::Mxfp4Format;

constexpr int kGemmWarps = 8;
constexpr int kGemmWarpTiles = 2;  // n8 tiles of output rows per warp
constexpr int kGemmThreads = kGemmWarps * kWarpSize;
constexpr int kTileN = kGemmWarps * kGemmWarpTiles * 8;
constexpr int kARowsPerPass = kGemmThreads / 16;  // A rows one pass of 16-byte loads covers
constexpr int kChunkRowWords = 64 + 4;            // one staged A row of one chunk, padded
constexpr int kAlignThreads = 1024;

// Chunks of 4 groups (128 inputs) over k inputs.
__host__ __device__ __forceinline__ int MoeChunks(int k) { return (k / 32 + 3) / 4; }

// Word of the GEMM's staged A rows (64 words per chunk) holding pair 2i + h (h = 0, 1) of group
// 4c + q: the MMA fragment layout (slots 2q, 2q + 1 of step i, or slots 2q + 8, 2q + 9), so
// ldmatrix reads a step's 16 x 16 tile.
__device__ __forceinline__ int StagedWord(int c, int i, int h, int q) {
  return c * 64 + i * 8 + h * 4 + q;
}

// Inputs 8v .. 8v + 7 of a group (`in`, 8 bf16) as its pairs 4v .. 4v + 3 (DecodeFp4Group's
// order: pair 4v + j holds inputs 8v + j and 8v + j + 4).
__device__ __forceinline__ uint4 PairsOfUnit(const uint4& in) {
  return make_uint4(__byte_perm(in.x, in.z, 0x5410), __byte_perm(in.x, in.z, 0x7632),
                    __byte_perm(in.y, in.w, 0x5410), __byte_perm(in.y, in.w, 0x7632));
}

// Inputs 8v .. 8v + 7 of group q of a chunk, as pairs, into that chunk's staged row at the words
// StagedWord names.
__device__ __forceinline__ void StageUnit(const uint4& in, int q, int v, uint32_t* chunk_row) {
  const uint4 pairs = PairsOfUnit(in);
  uint32_t* d = chunk_row + StagedWord(0, 2 * v, 0, q);
  d[0] = pairs.x;  // step 2v, slots 2q, 2q + 1
  d[4] = pairs.y;  // step 2v, slots 2q + 8, 2q + 9
  d[8] = pairs.z;  // step 2v + 1
  d[12] = pairs.w;
}

// The GEMV's input row: group-major, each group's 16 pairs in DecodeFp4Group order (a thread
// reads its group with four 16-byte loads), groups kGroupWords apart (the 4 groups a quad reads
// fall in distinct banks); zeros past k up to whole chunks. Threads `first`, first + step, ...
// each take 8 inputs (a 16-byte load): unit u is inputs 8v .. 8v + 7 of group u / 4 (v = u % 4).
constexpr int kGroupWords = 20;
__device__ __forceinline__ void StageGroupMajorRow(const bf16* x, int k, uint32_t* dst, int first,
                                                   int step) {
  const int units = MoeChunks(k) * 16;
  for (int u = first; u < units; u += step) {
    const uint4 in = u < k / 8 ? reinterpret_cast<const uint4*>(x)[u] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + u / 4 * kGroupWords + u % 4 * 4) = PairsOfUnit(in);
  }
}

// Outputs c (even) and c + 1 of pair p, biases added: with a.glu the activation of that
// (gate, up) pair, bf16; otherwise both values, f32.
__device__ __forceinline__ void StoreRowPair(const MoeGemmArgs& a, int p, int c, float even,
                                             float odd) {
  if (a.glu) {
    // Clamps that keep NaN (as std::clamp and torch.clamp do; fminf would drop it).
    const float gate = even > a.limit ? a.limit : even;
    const float up = odd < -a.limit ? -a.limit : (odd > a.limit ? a.limit : odd);
    const float act = (up + 1.0f) * (gate / (1.0f + expf(-a.alpha * gate)));
    static_cast<bf16*>(a.out)[static_cast<int64_t>(p) * (a.n / 2) + c / 2] = FromFloat<bf16>(act);
  } else {
    float* y = static_cast<float*>(a.out) + static_cast<int64_t>(p) * a.n + c;
    y[0] = even;
    y[1] = odd;
  }
}

__global__ void __launch_bounds__(kAlignThreads)
    MoeAlignKernel(const int32_t* ids, int pairs, int experts, MoeRouting r) {
  __shared__ int counts[kMoeMaxExperts];
  __shared__ int first_block[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ int total_blocks;
  for (int e = threadIdx.x; e < experts; e += kAlignThreads) {
    counts[e] = 0;
    cursor[e] = 0;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) {
    const int e = ids[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = 0;
    for (int e = 0; e < experts; ++e) {
      first_block[e] = b;
      b += (counts[e] + r.block_rows - 1) / r.block_rows;
    }
    total_blocks = b;
    *r.num_blocks = b;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < total_blocks * r.block_rows; i += kAlignThreads) {
    r.sorted_pairs[i] = -1;
  }
  for (int e = threadIdx.x; e < experts; e += kAlignThreads) {
    const int n = (counts[e] + r.block_rows - 1) / r.block_rows;
    for (int b = 0; b < n; ++b) r.block_expert[first_block[e] + b] = e;
  }
  __syncthreads();  // the padding is written before pairs overwrite their slots
  // Slots within an expert follow atomic order; no result depends on a pair's slot.
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) {
    const int e = ids[p];
    if (e < 0 || e >= experts) continue;
    r.sorted_pairs[first_block[e] * r.block_rows + atomicAdd(&cursor[e], 1)] = p;
  }
}

// GEMM tile: one CTA per (block of kBlockRows pair rows of one expert, kTileN output rows),
// K streamed in chunks of 4 groups. A chunk's A rows are loaded into registers one chunk ahead
// and staged permuted (StageUnit) in a double buffer; each warp owns kGemmWarpTiles n8 tiles of
// output rows, and thread (g, q) streams group 4c + q of row g of each, kGemmChunksInFlight
// chunks ahead, decodes them once and feeds them to the MMAs of every m16 tile of the block that
// holds pairs. A row's result does not depend on the other rows of its block.
template <typename Format, int kBlockRows>
__global__ void __launch_bounds__(kGemmThreads, Format::kGemmMinCtasPerSm)
    MoeGemmKernel(const __grid_constant__ MoeGemmArgs a) {
  constexpr int kGemmChunksInFlight = Format::kGemmChunksInFlight;
  constexpr int kMTiles = kBlockRows / 16;                 // m16 tiles of a block
  constexpr int kAUnits = kBlockRows * 16 / kGemmThreads;  // A loads (8 inputs) per thread
  const int blk = blockIdx.x;
  if (blk >= *a.routing.num_blocks) return;  // uniform across the CTA
  __shared__ __align__(16) uint32_t a_s[2][kBlockRows][kChunkRowWords];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int e = a.routing.block_expert[blk];
  const int32_t* pairs = a.routing.sorted_pairs + static_cast<int64_t>(blk) * kBlockRows;
  // A block's pairs come first, its padding last: only the m16 tiles with pairs run MMAs.
  const int rows = __syncthreads_count(threadIdx.x < kBlockRows && pairs[threadIdx.x] >= 0);
  const int m_tiles = (rows + 15) / 16;

  const int g = lane / 4, q = lane % 4;
  const int groups = a.k / 32, chunks = MoeChunks(a.k);
  // This thread's A loads: unit `unit` (8 inputs) of each chunk of rows first_row +
  // kARowsPerPass * j.
  static_assert(kAUnits >= 1 && kAUnits * kARowsPerPass == kBlockRows, "whole passes of A rows");
  static_assert(kGemmThreads >= kBlockRows, "a thread per pair row counts the block's pairs");
  const int unit = threadIdx.x % 16, first_row = threadIdx.x / 16;
  // 16-byte units from a.a.data to each row (-1: a padding row, zeros); a.a's rows are 16-byte
  // aligned (CudaBackend checks), and 32 bits hold every offset of a 1024-token round.
  int a_row[kAUnits];
#pragma unroll
  for (int j = 0; j < kAUnits; ++j) {
    const int p = pairs[first_row + kARowsPerPass * j];
    a_row[j] = p < 0 ? -1 : static_cast<int>(p / a.a_row_div * a.a.stride / 8);
  }
  const uint4* a_units = static_cast<const uint4*>(a.a.data);
  uint4 a_next[kAUnits];
  const auto load_a = [&](int chunk) {
    const int u = chunk * 16 + unit;
#pragma unroll
    for (int j = 0; j < kAUnits; ++j) {
      a_next[j] = a_row[j] >= 0 && u < a.k / 8 ? a_units[a_row[j] + u] : make_uint4(0, 0, 0, 0);
    }
  };
  const auto store_a = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kAUnits; ++j) {
      StageUnit(a_next[j], unit / 4, unit % 4, a_s[buf][first_row + kARowsPerPass * j]);
    }
  };

  constexpr int kT = kGemmWarpTiles;
  typename Format::Row wrow[kT];
  int col[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    col[t] = blockIdx.y * kTileN + (warp * kT + t) * 8;  // first output row of the n8 tile
    wrow[t] = Format::RowOf(a, e, col[t] + g);
  }
  typename Format::Group w[kGemmChunksInFlight][kT];
  const auto load_w = [&](int slot, int chunk) {
#pragma unroll
    for (int t = 0; t < kT; ++t) w[slot][t] = Format::Load(wrow[t], chunk * 4 + q, groups);
  };
#pragma unroll
  for (int slot = 0; slot < kGemmChunksInFlight; ++slot) load_w(slot, slot);
  load_a(0);
  store_a(0);
  __syncthreads();

  // ldmatrix.x4 rows: lanes 0-7 rows 0-7 and lanes 8-15 rows 8-15 of an m16 tile at words
  // 0-3 of a step (slots 0-7), lanes 16-31 the same rows at words 4-7 (slots 8-15).
  const int ld_row = lane % 16, ld_word = 4 * (lane / 16);
  float acc[kMTiles][kT][4] = {};
  for (int base = 0; base < chunks; base += kGemmChunksInFlight) {
#pragma unroll
    for (int slot = 0; slot < kGemmChunksInFlight; ++slot) {
      const int chunk = base + slot;
      if (chunk >= chunks) break;  // uniform: depends on the loop only
      const bool more = chunk + 1 < chunks;
      if (more) load_a(chunk + 1);
      typename Format::Group raw[kT];
      typename Format::Multiplier scale[kT];
      bool warp_one_factor = true;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        raw[t] = w[slot][t];
        scale[t] = Format::MultiplierOf(raw[t]);
        warp_one_factor = warp_one_factor && Format::OneFactor(scale[t]);
      }
      load_w(slot, chunk + kGemmChunksInFlight);
      const int buf = chunk % 2;
      // Step i takes pairs 2i and 2i + 1 of each tile's group, decoded just before (registers).
      const auto step = [&](auto i_constant, auto one_factor) {
        constexpr int i = decltype(i_constant)::value;
        constexpr bool kOne = decltype(one_factor)::value;
        uint32_t b[kT][2];
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          b[t][0] = Format::template Pair<2 * i, kOne>(raw[t], scale[t]);
          b[t][1] = Format::template Pair<2 * i + 1, kOne>(raw[t], scale[t]);
        }
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if (mt >= m_tiles) break;  // uniform across the CTA
          uint32_t frag[4];
          LdMatrixX4(frag,
                     reinterpret_cast<const bf16*>(&a_s[buf][mt * 16 + ld_row][i * 8 + ld_word]));
#pragma unroll
          for (int t = 0; t < kT; ++t) MmaBf16(acc[mt][t], frag, b[t][0], b[t][1]);
        }
      };
      const auto steps = [&](auto one_factor) {
        step(std::integral_constant<int, 0>{}, one_factor);
        step(std::integral_constant<int, 1>{}, one_factor);
        step(std::integral_constant<int, 2>{}, one_factor);
        step(std::integral_constant<int, 3>{}, one_factor);
        step(std::integral_constant<int, 4>{}, one_factor);
        step(std::integral_constant<int, 5>{}, one_factor);
        step(std::integral_constant<int, 6>{}, one_factor);
        step(std::integral_constant<int, 7>{}, one_factor);
      };
      // The decode is most of a thread's instructions at a few m16 tiles: one multiply per pair
      // instead of two when every scale of the warp allows it (a uniform branch).
      if constexpr (Format::kTwoFactors) {
        if (__all_sync(0xFFFFFFFFu, warp_one_factor)) {
          steps(std::true_type{});
        } else {
          steps(std::false_type{});
        }
      } else {
        steps(std::false_type{});
      }
      if (more) store_a((chunk + 1) % 2);  // the buffer chunk - 1 used, done before the barrier
      __syncthreads();
    }
  }

  // Accumulator layout: acc[mt][t][0..1] = row 16 mt + g, columns col + 2q, +1; [2..3] = row + 8.
  const bf16* bias = static_cast<const bf16*>(a.bias) + static_cast<int64_t>(e) * a.n;
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int c = col[t] + 2 * q;
    if (c >= a.n) continue;  // N is even, so c + 1 < N too
    const float b_even = ToFloat(bias[c]), b_odd = ToFloat(bias[c + 1]);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = pairs[mt * 16 + g + 8 * h];
        if (p < 0) continue;
        StoreRowPair(a, p, c, acc[mt][t][2 * h] + b_even, acc[mt][t][2 * h + 1] + b_odd);
      }
    }
  }
}

// GEMV tile (one token): one CTA per (pair, 16 output rows of its expert), the rows as the M of
// mma.sync m16n8k16 and the pair's input as column 0 of B (every lane loads the input; columns
// 1-7 of C are never read). The CTA's 4 warps split K: warp w takes the chunks of 4 groups w,
// w + 4, ..., and in a chunk thread q of row g loads group 4c + q of rows g and g + 8 (MXFP4: 16
// bytes each, a row's 4 threads 64 contiguous bytes; FP8: 32 and 128), kChunksInFlight chunks at
// a time. Codes are decoded in registers (Format::Decode: no table), and each group's 16 bf16
// pairs feed 8 MMAs; B holds the inputs in the same pair order, staged once per CTA in shared
// memory (StageGroupMajorRow). The warps' partial sums meet in shared memory and are added in
// warp order (deterministic).
constexpr int kGemvWarps = 4;
constexpr int kGemvThreads = kGemvWarps * kWarpSize;
constexpr int kGemvRows = 16;  // output rows per CTA: the M of one MMA

// Format::kGemvChunksInFlight: chunks per warp whose weights are loaded before the first is used
// (a group of each of 2 rows per thread), within the registers kGemvMinCtasPerSm CTAs leave.
template <typename Format>
__global__ void __launch_bounds__(kGemvThreads, Format::kGemvMinCtasPerSm)
    MoeGemvKernel(const __grid_constant__ MoeGemmArgs a) {
  constexpr int kChunksInFlight = Format::kGemvChunksInFlight;
  // pdl.cuh: the input is the previous kernel's output; the routing too unless
  // ids_before_previous_wait, when its writer completed before this kernel could launch.
  if (!a.ids_before_previous_wait) PdlBegin();
  extern __shared__ __align__(16) uint32_t gemv_smem[];  // read and written as uint4 too
  const int groups = a.k / 32, chunks = MoeChunks(a.k);
  uint32_t* xs = gemv_smem;  // the input, StageGroupMajorRow's layout
  float* partial = reinterpret_cast<float*>(xs + chunks * 4 * kGroupWords);  // [warps][rows]
  const int p = blockIdx.y;
  const int e = a.ids[p];
  if (e < 0 || e >= a.experts) return PdlWait();  // uniform; writes nothing (waits: pdl.cuh)
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int row0 = blockIdx.x * kGemvRows;

  // Every weight load of this thread first: they do not depend on the input.
  const typename Format::Row wrow[2] = {Format::RowOf(a, e, row0 + g),
                                        Format::RowOf(a, e, row0 + g + 8)};
  typename Format::Group w[kChunksInFlight][2];
  const auto load = [&](int base) {
#pragma unroll
    for (int c = 0; c < kChunksInFlight; ++c) {
      const int grp = (base + c * kGemvWarps) * 4 + q;
#pragma unroll
      for (int r = 0; r < 2; ++r) w[c][r] = Format::Load(wrow[r], grp, groups);
    }
  };
  load(warp);
  if (a.ids_before_previous_wait) PdlBegin();  // the weights' first chunks are in flight

  // The input, permuted, while the weights are in flight.
  StageGroupMajorRow(RowPtr<const bf16>(a.a, p / a.a_row_div), a.k, xs, threadIdx.x, kGemvThreads);
  __syncthreads();

  // Two accumulators, for even and odd MMAs of a group: two dependency chains instead of one
  // (2.04-2.05 against 2.06 ms/step at one token, 2.69 against 2.73 at two; four spill).
  float acc[4] = {}, acc_odd[4] = {};
  for (int base = warp; base < chunks; base += kGemvWarps * kChunksInFlight) {
    if (base != warp) load(base);
#pragma unroll
    for (int c = 0; c < kChunksInFlight; ++c) {
      const int chunk = base + c * kGemvWarps;
      if (chunk >= chunks) break;  // uniform across the warp
      uint32_t lo[16], hi[16];     // rows g and g + 8
      Format::Decode(w[c][0], lo);
      Format::Decode(w[c][1], hi);
      // B: the input's pairs of thread q's group, in column g of every lane (only column 0 of C
      // is read: the other columns' B values do not matter).
      uint32_t xw[16];
      const uint4* xg = reinterpret_cast<const uint4*>(xs + (chunk * 4 + q) * kGroupWords);
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 u = xg[v];
        xw[4 * v] = u.x, xw[4 * v + 1] = u.y, xw[4 * v + 2] = u.z, xw[4 * v + 3] = u.w;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        MmaBf16(i % 2 == 0 ? acc : acc_odd, {lo[2 * i], hi[2 * i], lo[2 * i + 1], hi[2 * i + 1]},
                xw[2 * i], xw[2 * i + 1]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] += acc_odd[i];
  // Column 0 of C: acc[0] (row g) and acc[2] (row g + 8) of the q = 0 threads.
  if (q == 0) {
    partial[warp * kGemvRows + g] = acc[0];
    partial[warp * kGemvRows + g + 8] = acc[2];
  }
  __syncthreads();
  if (threadIdx.x >= kGemvRows / 2) return;
  const int r = 2 * threadIdx.x;  // rows r, r + 1 of the tile: a (gate, up) pair for the GLU
  const int n = row0 + r;
  if (n >= a.n) return;  // N is even, so n + 1 < N too
  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int w = 0; w < kGemvWarps; ++w) {
    even += partial[w * kGemvRows + r];
    odd += partial[w * kGemvRows + r + 1];
  }
  const bf16* bias = static_cast<const bf16*>(a.bias) + static_cast<int64_t>(e) * a.n;
  StoreRowPair(a, p, n, even + ToFloat(bias[n]), odd + ToFloat(bias[n + 1]));
}

// out[t] = sum_j weights[t, j] * y[t * k + j]. A CTA takes kCombineCols columns of one token
// (4 per thread, float4 loads of y): the work of a decode step's single token spreads over
// hidden / kCombineCols CTAs instead of one CTA walking the whole row (12 us at one token).
constexpr int kCombineThreads = 128;
constexpr int kCombineCols = 4 * kCombineThreads;

// The hidden size is a multiple of 32 (MXFP4 groups), so every row is whole float4s.
__global__ void __launch_bounds__(kCombineThreads)
    MoeCombineKernel(const MoeCombineRows m, const RowsView out) {
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  const int64_t t = blockIdx.x;
  const bool bad = CombineHasBadId(m, t);
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCombineCols + threadIdx.x * 4;
  if (c0 >= out.cols) return;
  const float4 sum = CombineFloat4(m, t, out.cols, c0);
  *reinterpret_cast<uint2*>(RowPtr<bf16>(out, t) + c0) =
      bad ? make_uint2(kBf16NaNPairBits, kBf16NaNPairBits)
          : make_uint2(PackBf16x2(sum.x, sum.y), PackBf16x2(sum.z, sum.w));
}

}  // namespace

cudaError_t LaunchMoeAlign(const int32_t* ids, int pairs, int experts, const MoeRouting& routing,
                           cudaStream_t stream) {
  if (experts < 1 || experts > kMoeMaxExperts) return cudaErrorInvalidValue;
  MoeAlignKernel<<<1, kAlignThreads, 0, stream>>>(ids, pairs, experts, routing);
  return cudaGetLastError();
}

int64_t MoeGemvSharedBytes(int64_t k) {
  return (int64_t{MoeChunks(static_cast<int>(k))} * 4 * kGroupWords + kGemvWarps * kGemvRows) * 4;
}

namespace {
template <int kBlockRows>
cudaError_t LaunchGemmWith(const MoeGemmArgs& args, dim3 grid, cudaStream_t stream) {
  if (args.format == MoeWeightFormat::kFp8) {
    MoeGemmKernel<Fp8Format, kBlockRows><<<grid, kGemmThreads, 0, stream>>>(args);
  } else {
    MoeGemmKernel<Mxfp4Format, kBlockRows><<<grid, kGemmThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t LaunchMoeGemm(const MoeGemmArgs& args, cudaStream_t stream) {
  if (args.max_blocks == 0 || args.n == 0) return cudaSuccess;
  if (args.k % 32 != 0 || args.n % 2 != 0) return cudaErrorInvalidValue;
  // The kernel addresses A in 16-byte units from a.data with 32-bit offsets.
  const int64_t last_row = args.a.rows - 1;
  if (last_row * args.a.stride / 8 + args.k / 8 > INT32_MAX || args.a.stride % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(args.max_blocks),
                  static_cast<unsigned>((args.n + kTileN - 1) / kTileN));
  switch (args.routing.block_rows) {
    case kMoeBlockRows:
      return LaunchGemmWith<kMoeBlockRows>(args, grid, stream);
    case kMoeSmallBlockRows:
      return LaunchGemmWith<kMoeSmallBlockRows>(args, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

namespace {
template <typename Format>
cudaError_t LaunchGemvOf(const MoeGemmArgs& args, dim3 grid, int64_t smem, cudaStream_t stream) {
  if (const cudaError_t err = AllowDynamicSharedMemory<MoeGemvKernel<Format>>(smem);
      err != cudaSuccess) {
    return err;
  }
  return LaunchMaybePdl(MoeGemvKernel<Format>, grid, dim3(kGemvThreads), static_cast<size_t>(smem),
                        stream, args.pdl, args);
}
}  // namespace

cudaError_t LaunchMoeGemv(const MoeGemmArgs& args, cudaStream_t stream) {
  const int64_t pairs = args.a.rows * args.a_row_div;  // one A row per token or per pair
  if (pairs == 0 || args.n == 0) return cudaSuccess;
  if (args.k % 32 != 0 || args.n % 2 != 0 || pairs > 65535) return cudaErrorInvalidValue;
  const int64_t smem = MoeGemvSharedBytes(args.k);
  const dim3 grid(static_cast<unsigned>((args.n + kGemvRows - 1) / kGemvRows),
                  static_cast<unsigned>(pairs));
  return args.format == MoeWeightFormat::kFp8 ? LaunchGemvOf<Fp8Format>(args, grid, smem, stream)
                                              : LaunchGemvOf<Mxfp4Format>(args, grid, smem, stream);
}

cudaError_t LaunchMoeCombine(const MoeCombineRows& rows, const RowsView& out, cudaStream_t stream,
                             bool pdl) {
  if (out.rows == 0) return cudaSuccess;
  if (out.rows > INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(out.rows),
                  static_cast<unsigned>((out.cols + kCombineCols - 1) / kCombineCols));
  // float4 rows of y and 8-byte stores of out.
  if (out.cols % 4 != 0 || out.stride % 4 != 0 || reinterpret_cast<uintptr_t>(rows.y) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out.data) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  return LaunchMaybePdl(MoeCombineKernel, grid, dim3(kCombineThreads), 0, stream, pdl, rows, out);
}

MoeGemmArgs MoeLayerArgs::GateUp() const {
  return {.a = x,
          .a_row_div = top_k,
          .format = format,
          .blocks = gate_up_blocks,
          .scales = gate_up_scales,
          .bias = gate_up_bias,
          .n = 2 * inter,
          .k = hidden,
          .routing = MoeRoutingIn(routing, MaxBlocks(), BlockRows()),
          .max_blocks = MaxBlocks(),
          .glu = true,
          .limit = limit,
          .alpha = alpha,
          .out = act,
          .ids = ids,
          .experts = experts,
          .pdl = pdl};
}

MoeGemmArgs MoeLayerArgs::Down() const {
  return {.a = RowsView{.data = act, .rows = x.rows * top_k, .cols = inter, .stride = inter},
          .a_row_div = 1,
          .format = format,
          .blocks = down_blocks,
          .scales = down_scales,
          .bias = down_bias,
          .n = hidden,
          .k = inter,
          .routing = MoeRoutingIn(routing, MaxBlocks(), BlockRows()),
          .max_blocks = MaxBlocks(),
          .out = y,
          .ids = ids,
          .experts = experts,
          .pdl = pdl,
          // The gate_up GEMV before it waits for the router's ids, then triggers (PdlBegin).
          .ids_before_previous_wait = true};
}

cudaError_t LaunchMoeProjection(const MoeGemmArgs& args, bool gemv, cudaStream_t stream) {
  return gemv ? LaunchMoeGemv(args, stream) : LaunchMoeGemm(args, stream);
}

cudaError_t LaunchMoeLayer(const MoeLayerArgs& layer, bool gemv, cudaStream_t stream) {
  if (!gemv) {
    const cudaError_t err =
        LaunchMoeAlign(layer.ids, static_cast<int>(layer.x.rows * layer.top_k), layer.experts,
                       MoeRoutingIn(layer.routing, layer.MaxBlocks(), layer.BlockRows()), stream);
    if (err != cudaSuccess) return err;
  }
  for (const MoeGemmArgs& projection : {layer.GateUp(), layer.Down()}) {
    if (const cudaError_t err = LaunchMoeProjection(projection, gemv, stream); err != cudaSuccess) {
      return err;
    }
  }
  const MoeCombineRows combine{.y = layer.y,
                               .ids = layer.ids,
                               .weights = layer.weights,
                               .k = layer.top_k,
                               .experts = layer.experts};
  if (layer.norm.weight != nullptr) {  // the combine is the fused norm's input row
    NormArgs norm = layer.norm;
    norm.x = RowsView{.data = nullptr, .rows = layer.x.rows, .cols = layer.hidden, .stride = 0};
    norm.combine = combine;
    norm.pdl = layer.pdl && gemv;
    return LaunchRmsNorm(norm, stream);
  }
  return LaunchMoeCombine(combine, layer.out, stream, layer.pdl && gemv);
}

}  // namespace xserv::kernels::cuda
