// Prefill attention on tensor cores (FlashAttention-2 style) over the paged KV cache, for the
// sequences of a step with at least kFlashMinQueryLen new rows; PagedAttentionKernel skips those
// rows (attention.cu). GQA, sliding windows and per-head sinks as there.
//
// Tile: one CTA of 4 warps per (64 query rows of one sequence, query head). The rows' Q tile is
// staged in shared memory once and kept as mma.sync A fragments (16 rows per warp). Keys are
// walked in tiles of 64 from the window's first key to the last row's position, two tiles in
// flight: while the warps compute on one, cp.async gathers the next one's K and V rows through
// the block table into the other stage (zeros past the range). Per warp and tile
//   S = Q K^T          m16n8k16 bf16 MMAs (K fragments by ldmatrix), fp32 scores in log2 units;
//   mask               only on tiles the warp's rows do not all see whole (the causal diagonal,
//                      the window's edge, bad block-table entries);
//   online softmax     row max / sum over the 4 threads holding a row (quad shuffles), exp2;
//   O += P V           P rounded to bf16 as A fragments straight from the S accumulators,
//                      V fragments by ldmatrix.trans.
// Tiles are scheduled from the step's last backwards, every head of a tile together: within a
// sequence the heaviest (last rows, most keys) go first.
// The sink joins the normaliser at the end; a row with a bad block-table entry among its own keys
// comes out NaN (as in attention.cu). fp32 state; a row's result depends only on its
// sequence (not on the batch), but differs in rounding from PagedAttentionKernel's, so the
// batch-invariant mode does not use this kernel.
// FP8 cache (kFp8): the stages hold a tile's codes and its 64 keys' K and V scales; once a tile
// has landed the CTA converts its codes to bf16 K and V tiles (exact) for the same MMAs, each
// key's K scale joins its scores and its V scale its probabilities before P V.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/mma.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarpSize;
constexpr int kTileRows = kFlashWarps * 16;  // query rows per CTA
constexpr int kTileKeys = 64;
constexpr int kPad = 8;  // bf16 per shared row: 16-byte aligned rows, conflict-free fragments
static_assert(kTileRows <= kTileKeys, "the Q tile is staged in the second stage's K tile");

// Shared memory: 2 stages, each a tile's K and V rows (bf16; FP8: codes, rows of kDim + 16
// bytes, then the 64 keys' K and V scales); FP8 then the bf16 K and V tiles the codes convert to.
template <int kDim, bool kFp8>
struct FlashLayout {
  static constexpr int kLd = kDim + kPad;          // bf16 per K / V / Q row
  static constexpr int kTile = kTileKeys * kLd;    // bf16 of one K or V tile
  static constexpr int kCodeLd = kDim + 16;        // bytes per code row
  static constexpr int kRowBytes = kFp8 ? kCodeLd : kLd * 2;  // a key row in a stage
  static constexpr int kTileBytes = kTileKeys * kRowBytes;    // one K or V tile in a stage
  static constexpr int kStageBytes = 2 * kTileBytes + (kFp8 ? 2 * kTileKeys * 4 : 0);
  static constexpr int64_t kBytes = int64_t{2} * kStageBytes + (kFp8 ? int64_t{2} * kTile * 2 : 0);
  static_assert(kStageBytes % 16 == 0, "16-byte aligned stages");
};

template <int kDim, bool kFp8>
__global__ void __launch_bounds__(kFlashThreads, 2)
    FlashPrefillKernel(const __grid_constant__ PagedAttentionArgs a) {
  using L = FlashLayout<kDim, kFp8>;
  constexpr int kLd = L::kLd;
  constexpr int kVecs = kDim / 8;  // 16-byte vectors per bf16 row
  constexpr int kTile = L::kTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // FP8: the converted bf16 K and V tiles, after the stages.
  bf16* converted = reinterpret_cast<bf16*>(smem_raw + 2 * L::kStageBytes);
  // The Q tile until the loop starts: stage 1's K tile (bf16), the converted K tile (FP8).
  bf16* q_s = kFp8 ? converted : reinterpret_cast<bf16*>(smem_raw + L::kStageBytes);

  // This CTA's sequence and tile: the flash sequences' tiles in sequence order, walked from the
  // step's last (a sequence's heaviest first) as blockIdx.y grows.
  int s = -1, tile = static_cast<int>(gridDim.y - 1 - blockIdx.y);
  for (int i = 0; i < a.num_seqs; ++i) {
    const int q_len = a.query_start[i + 1] - a.query_start[i];
    if (q_len < a.flash_min_query_len) continue;
    const int tiles = (q_len + kTileRows - 1) / kTileRows;
    if (tile < tiles) {
      s = i;
      break;
    }
    tile -= tiles;
  }
  if (s < 0) return;  // not a tile (the grid is sized for the most tiles): uniform across the CTA
  const int h = blockIdx.x;
  const int q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
  const int row0 = tile * kTileRows;  // first row of the tile within the sequence's new rows
  // Rows past the step's tokens (bad query_start) are neither read nor written.
  if (q0 < 0 || q0 + row0 >= a.tokens) return;
  const int rows = min(min(kTileRows, q_len - row0), a.tokens - (q0 + row0));
  const int context = a.seq_lens[s] - q_len;  // position of new row i: context + i
  const int p_lo = context + row0, p_hi = p_lo + rows - 1;
  const int key_lo = a.sliding_window > 0 ? max(0, p_lo - a.sliding_window + 1) : 0;
  const int kv_head = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q4 = lane % 4;

  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.block_table_stride;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * kDim;
  constexpr int kElem = kFp8 ? 1 : 2;  // bytes per cached element
  const auto* k_src = static_cast<const unsigned char*>(a.k_cache) + kv_head * kDim * kElem;
  const auto* v_src = static_cast<const unsigned char*>(a.v_cache) + kv_head * kDim * kElem;
  const int k_first = key_lo / kTileKeys * kTileKeys;
  const int n_tiles = p_hi >= k_first ? (p_hi - k_first) / kTileKeys + 1 : 0;
  // Tile n's cache slots (-1: a key outside [key_lo, p_hi] or in a bad block) and bad keys (bit
  // j: key k0 + j sits in a block the table does not give), resolved two tiles ahead by the
  // first 64 threads, so the copies below do no division and no table read.
  __shared__ int32_t slot_s[3][kTileKeys];
  __shared__ uint32_t bad_s[3][kTileKeys / 32];
  const auto resolve = [&](int n) {
    if (threadIdx.x >= kTileKeys) return;  // whole warps
    const int j = k_first + n * kTileKeys + static_cast<int>(threadIdx.x);
    int slot = -1;
    bool bad = false;
    if (j >= key_lo && j <= p_hi) {
      const int entry = j / a.block_size;
      const int block = entry < a.block_table_width ? table[entry] : -1;
      bad = block < 0 || block >= a.num_blocks;
      if (!bad) slot = block * a.block_size + j % a.block_size;
    }
    slot_s[n % 3][threadIdx.x] = slot;
    const uint32_t bad_mask = __ballot_sync(kFullMask, bad);
    if (lane == 0) bad_s[n % 3][threadIdx.x / kWarpSize] = bad_mask;
  };
  // Tile n's K and V rows into stage n % 2 (zeros where there is no slot; the copy then reads
  // nothing), 16 bytes per copy; FP8: thread t copies key t % 64's K (t < 64) or V scale.
  const auto issue = [&](int n) {
    unsigned char* stage = smem_raw + (n % 2) * L::kStageBytes;
    constexpr int kRowVecs = kDim * kElem / 16;
    for (int i = threadIdx.x; i < kTileKeys * kRowVecs; i += kFlashThreads) {
      const int r = i / kRowVecs, c = i % kRowVecs;
      const int slot = slot_s[n % 3][r];
      const int64_t off = (slot >= 0 ? slot * slot_elems * kElem : 0) + c * 16;
      CpAsync16(stage + r * L::kRowBytes + c * 16, k_src + off, slot >= 0 ? 16 : 0);
      CpAsync16(stage + L::kTileBytes + r * L::kRowBytes + c * 16, v_src + off,
                slot >= 0 ? 16 : 0);
    }
    if constexpr (kFp8) {
      static_assert(kFlashThreads == 2 * kTileKeys);
      const int r = static_cast<int>(threadIdx.x) % kTileKeys;
      const bool of_v = static_cast<int>(threadIdx.x) >= kTileKeys;
      const int slot = slot_s[n % 3][r];
      const float* src = (of_v ? a.v_scale : a.k_scale) +
                         (slot >= 0 ? static_cast<int64_t>(slot) * a.kv_heads + kv_head : 0);
      float* scales = reinterpret_cast<float*>(stage + 2 * L::kTileBytes);
      CpAsync4(scales + (of_v ? kTileKeys : 0) + r, src, slot >= 0 ? 4 : 0);
    }
    CpAsyncCommit();
  };
  if (n_tiles > 0) resolve(0);
  if (n_tiles > 1) resolve(1);
  __syncthreads();
  if (n_tiles > 0) issue(0);

  const bf16* q_rows = static_cast<const bf16*>(a.q) + static_cast<int64_t>(q0 + row0) *
                                                         a.q_token_stride +
                       static_cast<int64_t>(h) * kDim;
  for (int i = threadIdx.x; i < kTileRows * kVecs; i += kFlashThreads) {
    const int r = i / kVecs, c = i % kVecs;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = *reinterpret_cast<const uint4*>(q_rows + r * a.q_token_stride + c * 8);
    *reinterpret_cast<uint4*>(q_s + r * kLd + c * 8) = v;
  }
  __syncthreads();
  uint32_t qa[kDim / 16][4];
  LoadQueryFragments<kDim, kLd>(qa, q_s + warp * 16 * kLd, lane);
  // The thread's two rows (g and g + 8 of its warp's 16): positions and first keys. Rows past
  // the sequence's new rows see no key (and are not written).
  int pos[2], first[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = warp * 16 + g + 8 * r;
    pos[r] = i < rows ? p_lo + i : -1;
    first[r] = a.sliding_window > 0 ? max(0, pos[r] - a.sliding_window + 1) : 0;
  }
  // The keys every row of the warp sees: [warp_lo, warp_hi] (empty when a row is past `rows`).
  const int w_row0 = warp * 16;
  const bool warp_full = w_row0 + 15 < rows;
  const int warp_hi = p_lo + w_row0;
  const int warp_lo = a.sliding_window > 0 ? max(0, p_lo + w_row0 + 15 - a.sliding_window + 1) : 0;
  const float scale = a.scale * kLog2e;  // scores in log2 units

  float o[kDim / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  bool bad[2] = {false, false};  // a key the row sees has a bad block-table entry

  for (int n = 0; n < n_tiles; ++n) {
    CpAsyncWait<0>();  // this thread's copies of tile n have landed ...
    __syncthreads();   // ... and everyone's; the other stage (tile n - 1, and Q) is consumed
    if (n + 1 < n_tiles) issue(n + 1);
    if (n + 2 < n_tiles) resolve(n + 2);  // its buffers held tile n - 1's, consumed
    const int k0 = k_first + n * kTileKeys;
    const unsigned char* stage = smem_raw + (n % 2) * L::kStageBytes;
    const bf16* k_s = reinterpret_cast<const bf16*>(stage);
    const bf16* v_s = k_s + kTile;
    const float* tile_scales = nullptr;  // FP8: the 64 keys' K scales, then their V scales
    if constexpr (kFp8) {
      // The warps are done with the converted tiles of tile n - 1 (the barrier above).
      ConvertFp8Rows<kDim>(stage, L::kCodeLd, converted, kLd, kTileKeys, threadIdx.x,
                           kFlashThreads);
      ConvertFp8Rows<kDim>(stage + L::kTileBytes, L::kCodeLd, converted + kTile, kLd, kTileKeys,
                           threadIdx.x, kFlashThreads);
      __syncthreads();
      k_s = converted;
      v_s = converted + kTile;
      tile_scales = reinterpret_cast<const float*>(stage + 2 * L::kTileBytes);
    }
    const uint64_t key_bad = bad_s[n % 3][0] | uint64_t{bad_s[n % 3][1]} << 32;

    // Scores of the warp's 16 rows against the tile's 64 keys: 8 n8 tiles.
    float sc[kTileKeys / 8][4] = {};
    TileScores<kDim, kTileKeys / 8, kLd>(sc, qa, k_s, lane);
    // sc[nt][e]: row g + 8 * (e / 2), key k0 + nt * 8 + 2 * q4 + e % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
    const bool whole =
        warp_full && key_bad == 0 && k0 >= warp_lo && k0 + kTileKeys - 1 <= warp_hi;
    ScaleAndMaskScores<kTileKeys / 8, kFp8>(sc, tile_max, whole, k0, first, pos, key_bad, bad,
                                            scale, tile_scales, q4);
    OnlineSoftmaxUpdate<kTileKeys / 8, kDim, /*kBase2=*/true>(sc, tile_max, m, l, o);
    if constexpr (kFp8) ScaleByKey<kTileKeys / 8>(sc, tile_scales + kTileKeys, q4);  // V's
    AccumulatePV<kTileKeys / 8, kDim, kLd>(o, sc, v_s, lane);
  }
  // A row is bad when any of its keys is: the 4 lanes of the row saw different keys.
  for (bool& b : bad) b = QuadAny(b);

  const float sink = a.sinks != nullptr ? a.sinks[h] * kLog2e : -INFINITY;
  bf16* out_rows = static_cast<bf16*>(a.out) + static_cast<int64_t>(q0 + row0) *
                                                   a.out_token_stride +
                   static_cast<int64_t>(h) * kDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = warp * 16 + g + 8 * r;
    if (i >= rows) continue;
    const float mm = fmaxf(m[r], sink);
    const float factor = l[r] > 0.0f ? exp2f(m[r] - mm) : 0.0f;
    float denom = l[r] * factor + (a.sinks != nullptr ? exp2f(sink - mm) : 0.0f);
    if (bad[r] || pos[r] < first[r]) denom = __int_as_float(0x7fc00000);
    const float f = factor / denom;
    bf16* out = out_rows + static_cast<int64_t>(i) * a.out_token_stride + 2 * q4;
#pragma unroll
    for (int dt = 0; dt < kDim / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(out + dt * 8) =
          PackBf16x2(o[dt][2 * r] * f, o[dt][2 * r + 1] * f);
    }
  }
}

template <int kDim, bool kFp8>
cudaError_t LaunchFlash(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr int64_t kSmem = FlashLayout<kDim, kFp8>::kBytes;
  if (const cudaError_t err = AllowDynamicSharedMemory<FlashPrefillKernel<kDim, kFp8>>(kSmem);
      err != cudaSuccess) {
    return err;
  }
  // Each flash sequence (>= flash_min_query_len rows) adds at most one partly filled tile to the
  // tokens / 64 full ones.
  const int flash_seqs = std::min(a.num_seqs, a.tokens / a.flash_min_query_len);
  const int64_t tiles = (int64_t{a.tokens} + kTileRows - 1) / kTileRows + flash_seqs;
  if (tiles > 65535) return cudaErrorInvalidValue;  // grid y
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>(tiles));
  FlashPrefillKernel<kDim, kFp8><<<grid, kFlashThreads, static_cast<size_t>(kSmem), stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool FlashPrefillSupports(int head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchFlashPrefill(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.heads == 0 || args.flash_min_query_len < 1) return cudaSuccess;
  if ((args.k_scale == nullptr) != (args.v_scale == nullptr)) return cudaErrorInvalidValue;
  const bool fp8 = args.k_scale != nullptr;
  if (args.head_dim == 64) {
    return fp8 ? LaunchFlash<64, true>(args, stream) : LaunchFlash<64, false>(args, stream);
  }
  if (args.head_dim == 128) {
    return fp8 ? LaunchFlash<128, true>(args, stream) : LaunchFlash<128, false>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace xserv::kernels::cuda
