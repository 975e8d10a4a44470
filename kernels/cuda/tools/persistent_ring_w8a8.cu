// The persistent step's shared-memory ring with FP8 x FP8 tensor-core arithmetic
// (persistent_step.h, PersistentStepArgs::ring_w8a8).
//
// As persistent_ring.cu (one CTA of 16 warps per SM, chunks copied ahead into shared memory
// across the barriers), but with kStages stages (kStages - 1 chunks in flight while one
// computes: two halves measured no faster than the CUDA-core ring), a CTA owning whole tiles of
// 16 rows (the M of mma.sync m16n8k32), and a chunk one tile's rows over kChunkCols inputs (the
// tile's sums stay in registers across its chunks).
// Each phase's x is quantised once per CTA as QuantizeFp8Rows does (a scale per 128 inputs), so
// the results are W8A8's, not the GEMV's bits. In a chunk the warps take its 64-input steps in
// turn; thread (g, q) reads 16 codes of rows g and g + 8 and of x at inputs 16q.. of the step,
// which are the two MMAs' fragments as they lie (the W8A8 GEMV's mapping, branch
// exp/fp8-w8a8-gemv). A tile's warps meet in shared memory in warp order. Rows are padded in the
// ring so that the rows a quarter-warp reads fall in different banks. The ring's shape (stages,
// chunk inputs) and its copies (every thread's 16-byte cp.async, or a TMA bulk copy per row
// tracked by a stage's mbarrier) are the bench's to choose.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/l2_prefetch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tools/persistent_common.cuh"
#include "kernels/cuda/tools/persistent_step.h"

namespace xserv::kernels::cuda::bench {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kTileRows = 16;
constexpr int kStep = 64;
constexpr int kGroup = 128;  // weight block and activation scale
constexpr int kMaxK = 12288;
constexpr int kPad = 64;  // rows g and g + 1 a half line apart: no bank conflict
constexpr int kXBytes = kMaxK + (kMaxK / kGroup) * 4;  // x's codes and scales
constexpr int kMaxSmem = 227 * 1024;
// The ring of kStages chunks of kChunkCols inputs (kStages - 1 in flight while one computes).
// A stage: its tile's row of weight block scales (copied with the rows, so that no global load
// waits in a chunk's arithmetic), then the tile's rows.
constexpr int kScaleRowBytes = (kMaxK / kGroup) * 4;
template <int kStages, int kChunkCols>
struct Ring {
  static constexpr int kStageBytes = kScaleRowBytes + kTileRows * (kChunkCols + kPad);
  static constexpr int kSmemBytes = kXBytes + kStages * kStageBytes;
  static_assert(kSmemBytes <= kMaxSmem && kChunkCols % kGroup == 0);
};

struct Cursor {
  int phase = 0, tile = 0, col = 0;  // col: the chunk of inputs
};

__device__ __forceinline__ int TilesPerCta(int n) {
  const int tiles = (n + kTileRows - 1) / kTileRows;
  return (tiles + gridDim.x - 1) / gridDim.x;
}
// This CTA's tiles of a phase: contiguous, [first, first + count). Its j-th tile's index:
__device__ __forceinline__ int TileIndex(int n, int j) {
  const int tiles = (n + kTileRows - 1) / kTileRows;
  return min(tiles, static_cast<int>(blockIdx.x) * TilesPerCta(n)) + j;
}
__device__ __forceinline__ int TileCount(int n) {
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int first = TileIndex(n, 0);
  return min(tiles, first + TilesPerCta(n)) - first;
}
__device__ __forceinline__ bool Streams(const StreamPhase& p) {
  return p.w != nullptr && TileCount(p.n) > 0;
}

// x (bf16 [k]) to E4M3 codes and a scale per 128 inputs, as QuantizeFp8Rows: 16 lanes of 8.
// x is read from L2 (__ldcg): other SMs wrote it in this launch, and an L1 line from before
// would be stale.
__device__ __forceinline__ void QuantizeX(const StreamPhase& p, uint8_t* codes, float* scales) {
  // All of a thread's loads first (k up to 12,288: 3 per thread): one L2 round trip, not one
  // per pass, on the path from the barrier to the phase's first MMA.
  constexpr int kPasses = kMaxK / 8 / kThreads;
  const int chunks = p.k / 8;
  const uint4* x = static_cast<const uint4*>(p.x);
  uint4 raw[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int c = threadIdx.x + pass * kThreads;
    raw[pass] = c < chunks ? __ldcg(x + c) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int c = threadIdx.x + pass * kThreads;
    if (c - threadIdx.x % kWarpSize >= chunks) break;  // the whole warp is past x
    float v[8];
    UnpackBf16x8(raw[pass], v);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
    if (c >= chunks) continue;
    const float scale = Fp8ScaleOf(amax);
    uint2 packed = make_uint2(0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      packed.x |= uint32_t{Fp8CodeOf(v[i], scale)} << (8 * i);
      packed.y |= uint32_t{Fp8CodeOf(v[4 + i], scale)} << (8 * i);
    }
    reinterpret_cast<uint2*>(codes)[c] = packed;
    if (c % 16 == 0) scales[c / 16] = scale;
  }
}

// The bulk-copy (TMA) form's completion: a stage's mbarrier counts the bytes of its rows.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarrierInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void MbarrierExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void MbarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(bar)) : "memory");
}
__device__ __forceinline__ void MbarrierWait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(SharedAddress(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory by the
// TMA unit, counted on `bar` when they land.
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}

// The time now into a phase's trace record (PhaseTrace).
__device__ __forceinline__ void Stamp(unsigned long long* trace, int ns_field, int cycles_field) {
  unsigned long long ns = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  trace[ns_field] = ns;
  trace[cycles_field] = clock64();
}

// kBulk: thread 0 copies each row of a chunk with one bulk copy (TMA) and the warps wait on the
// stage's mbarrier, instead of every thread's 16-byte cp.async and cp.async groups.
// kProducer (with kBulk): one more warp, whose lane 0 alone issues every chunk in order as soon
// as the 16 computing warps have released its stage (an `empty` mbarrier per stage), so that
// copies stay in flight across the grid barriers and x's quantisation; the computing warps then
// meet through named barrier 1.
template <int kStages, int kChunkCols, bool kBulk, bool kProducer>
__global__ void __launch_bounds__(kThreads + (kProducer ? kWarpSize : 0), 1)
    PersistentRingW8A8Kernel(const __grid_constant__ PersistentStepArgs s) {
  static_assert(kBulk || !kProducer);
  constexpr int kStageBytes = Ring<kStages, kChunkCols>::kStageBytes;
  constexpr int kSync = kProducer ? kThreads : 0;  // CtaSync's: the computing warps
  __shared__ uint64_t full[kStages];               // kBulk: a stage's rows have landed
  __shared__ uint64_t empty[kStages];  // kProducer: the computing warps are done with a stage
  const auto col_chunks = [](int k) { return (k + kChunkCols - 1) / kChunkCols; };
  extern __shared__ uint4 smem[];
  auto* x_codes = reinterpret_cast<uint8_t*>(smem);
  auto* x_scales = reinterpret_cast<float*>(x_codes + kMaxK);
  uint8_t* ring = x_codes + kXBytes;
  __shared__ float partial[kWarps][kTileRows];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q = lane % 4;

  // Chunk c's first byte in PackRingTiles' layout (ring_tiled): the chunk lies whole.
  const auto packed_chunk = [&](const Cursor& c) {
    const StreamPhase& p = s.phases[c.phase];
    const int64_t chunk = int64_t{TileIndex(p.n, c.tile)} * (p.k / kChunkCols) + c.col;
    return p.w + chunk * (kTileRows * kChunkCols);
  };
  const auto copy = [&](const Cursor& c, int h) {
    const StreamPhase& p = s.phases[c.phase];
    const int row0 = TileIndex(p.n, c.tile) * kTileRows;
    const int col0 = c.col * kChunkCols;
    const int cols = min(kChunkCols, p.k - col0), vecs_per_row = cols / 16;
    const int scale_cols = (p.k + kGroup - 1) / kGroup;  // a multiple of 4 (k % 512 == 0)
    const float* scale_row = p.scales + (row0 / kGroup) * scale_cols;
    uint8_t* const stage = ring + h * kStageBytes;
    uint8_t* const dst = stage + kScaleRowBytes;
    if constexpr (kBulk) {
      if (threadIdx.x != (kProducer ? kThreads : 0)) return;
      const int rows = min(kTileRows, p.n - row0);
      MbarrierExpectBytes(&full[h], static_cast<uint32_t>(rows * cols + scale_cols * 4));
      BulkCopy(stage, scale_row, scale_cols * 4, &full[h]);
      if (s.ring_tiled) {
        BulkCopy(dst, packed_chunk(c), kTileRows * kChunkCols, &full[h]);
        return;
      }
      for (int r = 0; r < rows; ++r) {
        BulkCopy(dst + r * (cols + kPad), p.w + int64_t{row0 + r} * p.k + col0, cols, &full[h]);
      }
    } else {
      if (threadIdx.x < scale_cols / 4)
        CpAsync16(stage + 16 * threadIdx.x, scale_row + 4 * threadIdx.x, 16);
      for (int v = threadIdx.x; v < kTileRows * vecs_per_row; v += kThreads) {
        const int r = v / vecs_per_row, col = (v % vecs_per_row) * 16;
        if (row0 + r < p.n) {
          CpAsync16(dst + r * (cols + kPad) + col, p.w + int64_t{row0 + r} * p.k + col0 + col, 16);
        }
      }
    }
  };
  // The chunk after c: the next inputs of the tile, the next tile, else the first of the next
  // phase that streams (phase == num_phases: none).
  const auto next_of = [&](Cursor c) {
    const StreamPhase& p = s.phases[c.phase];
    if (++c.col < col_chunks(p.k)) return c;
    c.col = 0;
    if (++c.tile < TileCount(p.n)) return c;
    c.tile = 0;
    ++c.phase;
    while (c.phase < s.num_phases && !Streams(s.phases[c.phase])) ++c.phase;
    return c;
  };

  // `ahead`: the next chunk to copy, kStages - 1 chunks ahead of the one computing (stage cur).
  if constexpr (kBulk) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) {
        MbarrierInit(&full[st], 1);
        MbarrierInit(&empty[st], kWarps);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
  }
  Cursor ahead;
  while (ahead.phase < s.num_phases && !Streams(s.phases[ahead.phase])) ++ahead.phase;
  if constexpr (kProducer) {
    if (threadIdx.x >= kThreads) {  // the producer warp: chunk j into stage j % kStages
      if (threadIdx.x > kThreads) return;
      // With ring_l2_ahead (packed weights), chunk j + ring_l2_ahead is asked into L2 as chunk j
      // is copied, so HBM keeps streaming while a full ring waits on a barrier.
      Cursor l2 = ahead;
      const auto prefetch_l2 = [&] {
        BulkPrefetchL2(packed_chunk(l2), kTileRows * kChunkCols);
        l2 = next_of(l2);
      };
      const int l2_ahead = s.ring_tiled ? s.ring_l2_ahead : 0;
      for (int j = 0; j < l2_ahead && l2.phase < s.num_phases; ++j) l2 = next_of(l2);
      for (int j = 0; ahead.phase < s.num_phases; ++j) {
        const int st = j % kStages;
        if (l2_ahead > 0 && l2.phase < s.num_phases) prefetch_l2();
        if (j >= kStages) MbarrierWait(&empty[st], (j / kStages - 1) & 1);
        copy(ahead, st);
        ahead = next_of(ahead);
      }
      return;
    }
    ahead.phase = s.num_phases;  // the computing warps issue nothing
  }
  for (int st = 0; st < kStages - 1; ++st) {
    if (ahead.phase < s.num_phases) {
      copy(ahead, st);
      ahead = next_of(ahead);
    }
    if constexpr (!kBulk) CpAsyncCommit();
  }
  int cur = 0;
  uint32_t parity = 0;  // kBulk: of stage cur's mbarrier (flips as cur wraps)
  for (int i = 0; i < s.num_phases; ++i) {
    const StreamPhase p = s.phases[i];
    unsigned long long* const trace =
        s.trace != nullptr && threadIdx.x == 0
            ? s.trace + (int64_t{i} * gridDim.x + blockIdx.x) * kTraceFields
            : nullptr;
    if (trace != nullptr) Stamp(trace, kArriveNs, kArriveCycles);
    if (i > 0 && s.barriers) GridBarrier<kSync>(s.barrier, static_cast<unsigned>(i) * gridDim.x);
    if (trace != nullptr) Stamp(trace, kReleaseNs, kReleaseCycles);
    if (p.w == nullptr) {
      RunLatencyPhase<kThreads>(p);
      continue;
    }
    const int tile_count = TileCount(p.n);
    if (tile_count == 0) continue;
    QuantizeX(p, x_codes, x_scales);
    CtaSync<kSync>();  // x's codes before any warp's first step (the bulk form's wait is no sync)
    if (trace != nullptr) Stamp(trace, kReadyNs, kReadyCycles);
    for (int t = 0; t < tile_count; ++t) {
      const int row0 = TileIndex(p.n, t) * kTileRows;
      float acc[4] = {};
      for (int col = 0; col < col_chunks(p.k); ++col) {
        if (ahead.phase < s.num_phases) {  // into the stage freed by the previous chunk
          copy(ahead, (cur + kStages - 1) % kStages);
          ahead = next_of(ahead);
        }
        if constexpr (kBulk) {
          MbarrierWait(&full[cur], parity);
        } else {
          CpAsyncCommit();
          CpAsyncWait<kStages - 1>();
          __syncthreads();
        }
        const int col0 = col * kChunkCols, cols = min(kChunkCols, p.k - col0);
        const auto* w_scales = reinterpret_cast<const float*>(ring + cur * kStageBytes);
        const uint8_t* buf = ring + cur * kStageBytes + kScaleRowBytes;
        // Rows g and g + 8 at 16-byte unit u: padded rows, or PackRingTiles' swizzle.
        const int row_bytes = s.ring_tiled ? kChunkCols : cols + kPad;
        const int swizzle = s.ring_tiled ? (g & 1) << 2 : 0;
        for (int st = warp; st < (s.ring_no_math ? 0 : cols / kStep); st += kWarps) {
          const int at = st * kStep + 16 * q, u = (st * kStep / 16 + q) ^ swizzle;
          const uint4 lo = *reinterpret_cast<const uint4*>(buf + g * row_bytes + 16 * u);
          const uint4 hi = *reinterpret_cast<const uint4*>(buf + (g + 8) * row_bytes + 16 * u);
          const uint4 xv = *reinterpret_cast<const uint4*>(x_codes + col0 + at);
          float step[4] = {};
          MmaE4m3(step, {lo.x, hi.x, lo.y, hi.y}, xv.x, xv.y);
          MmaE4m3(step, {lo.z, hi.z, lo.w, hi.w}, xv.z, xv.w);
          const int group = (col0 + st * kStep) / kGroup;
          const float scale = w_scales[group] * x_scales[group];
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[j] = fmaf(step[j], scale, acc[j]);
        }
        if constexpr (kProducer) {  // this warp is done with the stage
          __syncwarp();
          if (lane == 0) MbarrierArrive(&empty[cur]);
        } else {
          __syncthreads();  // this stage is free for the next copy
        }
        if (++cur == kStages) {
          cur = 0;
          parity ^= 1;
        }
      }
      // C column 0 (x's row, in every column alike): acc[0] row g, acc[2] row g + 8 of q = 0.
      if (q == 0) {
        partial[warp][g] = acc[0];
        partial[warp][g + 8] = acc[2];
      }
      CtaSync<kSync>();
      if (threadIdx.x < kTileRows && row0 + threadIdx.x < p.n) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += partial[w][threadIdx.x];
        static_cast<__nv_bfloat16*>(p.out)[row0 + threadIdx.x] = __float2bfloat16_rn(sum);
      }
      CtaSync<kSync>();  // partial is the next tile's
    }
  }
  if constexpr (!kBulk) CpAsyncWait<0>();
}

// One thread per 16 bytes of w: tile t's chunk c (16 rows x cols inputs) at (t * chunks + c) *
// 16 * cols, row r of it at r * cols, its 16-byte unit u at (u ^ 4 (r & 1)) * 16 (rows g and g
// + 1, which a quarter-warp reads together, in different halves of a 128-byte line).
__global__ void PackRingTilesKernel(const uint4* w, int n, int k, int cols, uint4* out) {
  const int64_t units = int64_t{n} * (k / 16);
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const int row = static_cast<int>(i / (k / 16)), col = static_cast<int>(i % (k / 16)) * 16;
  const int r = row % kTileRows, u = (col % cols) / 16;
  const int64_t chunk = int64_t{row / kTileRows} * (k / cols) + col / cols;
  out[(chunk * kTileRows * cols + int64_t{r} * cols) / 16 + (u ^ ((r & 1) << 2))] = w[i];
}

template <int kStages, int kChunkCols>
cudaError_t LaunchRing(const PersistentStepArgs& args, cudaStream_t stream) {
  // One CTA per SM: its shared memory takes most of one.
  constexpr int kSmem = Ring<kStages, kChunkCols>::kSmemBytes;
  if (args.ring_producer_warp) {
    return LaunchOnEveryResidentCta<PersistentRingW8A8Kernel<kStages, kChunkCols, true, true>>(
        args, kThreads + kWarpSize, kSmem, stream);
  }
  return args.ring_bulk
             ? LaunchOnEveryResidentCta<PersistentRingW8A8Kernel<kStages, kChunkCols, true, false>>(
                   args, kThreads, kSmem, stream)
             : LaunchOnEveryResidentCta<
                   PersistentRingW8A8Kernel<kStages, kChunkCols, false, false>>(args, kThreads,
                                                                                kSmem, stream);
}

}  // namespace

cudaError_t LaunchPersistentRingW8A8(const PersistentStepArgs& args, int max_k,
                                     cudaStream_t stream) {
  if (max_k > kMaxK || ((args.ring_tiled || args.ring_producer_warp) && !args.ring_bulk)) {
    return cudaErrorInvalidValue;
  }
  // The ring shapes the bench sweeps (persistent_step.h lists them).
  const auto shape = [&](int stages, int cols) {
    return args.ring_stages == stages && args.ring_chunk_cols == cols;
  };
  if (shape(5, 2048)) return LaunchRing<5, 2048>(args, stream);
  if (shape(6, 2048)) return LaunchRing<6, 2048>(args, stream);
  if (shape(3, 4096)) return LaunchRing<3, 4096>(args, stream);
  if (shape(8, 1024)) return LaunchRing<8, 1024>(args, stream);
  if (shape(12, 1024)) return LaunchRing<12, 1024>(args, stream);
  if (shape(16, 512)) return LaunchRing<16, 512>(args, stream);
  return cudaErrorInvalidValue;
}

cudaError_t PackRingTiles(const uint8_t* w, int n, int k, int chunk_cols, uint8_t* out,
                          cudaStream_t stream) {
  if (n % kTileRows != 0 || k % chunk_cols != 0 || chunk_cols % 128 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t units = int64_t{n} * (k / 16);
  PackRingTilesKernel<<<static_cast<unsigned>((units + 255) / 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(w), n, k, chunk_cols, reinterpret_cast<uint4*>(out));
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda::bench
