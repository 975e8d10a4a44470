// Decode attention on tensor cores with GQA packing, for the sequences of a step whose new rows
// times the query heads per kv head fit one 16-row mma tile (decode rows; short speculative
// chunks). PagedAttentionKernel and the flash prefill kernel leave those rows alone.
//
// Why: the CUDA-core kernel (attention.cu) gives each query head its own warp, so a kv head's
// keys are fetched once per query head (4x for Qwen3's 32/8 heads) with uncoalesced per-lane row
// loads; at 256 decode rows it reached 19 % of the read roofline. Here the tile rows are
// (new row, query head of the kv head) pairs, so each key and value row is read once:
//
// Grid: (sequence, kv head, CTA of P sharing the keys), the first two swapped with
// decode_kv_heads_first (SequenceOf). A CTA of 4 warps (3 in the four-per-SM form, 8 in the
// wide form, below); the sequence's keys are cut into 16-key tiles dealt round robin to the
// warps of P' CTAs, P' <= P the CTAs its length needs (at least 8 tiles per CTA, 32 in the wide
// form). The host sizes P for the longest sequence a graph may see, bounded by a sliding window,
// and gives up to kDecodeOneCtaTiles tiles one CTA.
// Each warp streams its tiles through a 2- or 3-stage cp.async ring (by grid size, below) in its
// own shared memory (no CTA barrier in the loop), and per tile
//   S = Q K^T   2 n8 x (head_dim / 16) m16n8k16 MMAs, scaled to log2 units and masked (causal +
//               window; a tile every row sees whole, the common case, skips the mask);
//   online softmax (exp2) over the quad of lanes holding a row;
//   O += P V    P as bf16 A fragments from the S accumulators, V by ldmatrix.trans.
// The 4 warps' states merge in shared memory in warp order; with P > 1 each CTA writes its state
// and a second kernel merges the P states in CTA order. The sink joins the normaliser at the end.
// fp32 state; the result depends on P (the host picks it from the batch's size), so the
// batch-invariant mode does not use this kernel. Bad block-table entries among a row's keys make
// the row NaN, as in attention.cu.
// FP8 cache (kFp8): the ring holds a tile's codes (half the bytes) and its 16 keys' scales; the
// MMAs read the codes straight into f16 fragments by the hardware conversion (exact: every E4M3
// value is an f16; Q and P in f16; the head dims in flash_tile.cuh's FP8 order), with each key's
// K scale applied to its scores and its V scale to its values, in f16, before P V. The
// conversions were this kernel's largest cost: at b=256 it ran at a third of its read roofline.
// Keys as M (kKeysAsM, PagedAttentionArgs::decode_keys_as_m; keys_as_m_tile.cuh): the same
// ring, grid and merges, but each tile's products transposed (S^T = K Q^T, O^T = V^T P^T) with
// the tile's rows, at most kDecodeKeysAsMRows, as the MMAs' N: half the MMAs and accumulators
// when a kv head has few query heads (Qwen3-8B FP8 at 256 rows: 4.0 -> 3.0 ms of attention per
// step, docs/benchmarks session 24).
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/keys_as_m_tile.cuh"
#include "kernels/cuda/mma.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;  // per CTA (but in the four-per-SM form below)
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRows = kDecodeTileRows;  // one m16 tile
constexpr int kTileKeys = 16;           // one k16 slice of P V
constexpr int kPad = 8;                 // bf16 per shared row: conflict-free fragment reads
// A warp's ring: 3 tiles in flight (2 CTAs per SM at head_dim 128), or 2 with a third CTA per
// SM, which pays once the grid has many CTAs per SM. Qwen3-8B on an H200, 384-token contexts
// (docs/benchmarks, session 15), ms per decode step: b=64 6.32 deep vs 6.46 shallow; b=256
// 12.85 deep vs 12.40 shallow. The switch sits between them: the step's (sequence, kv head)
// pairs, prefill sequences included, >= 1024. At head_dim 64 (gpt-oss; 3 deep CTAs fit already)
// the switch was not measured on its own: gpt-oss b=256 ran 12.84 -> 12.30 ms with all of the
// session's changes together. The FP8 cache switches at the same count: Qwen3-8B FP8 W8A8 + FP8
// KV, b=256 11.90-11.95 -> 10.76-10.77 ms (session 16, when the FP8 warps still converted each
// tile to bf16 in shared memory).
constexpr int kDeepStages = 3;
constexpr int kShallowStages = 2;
constexpr int kShallowMinPairs = 1024;
// The four-per-SM form (PagedAttentionArgs::decode_four_ctas_per_sm): the bf16 cache's shallow
// ring with the keys as M at head_dim 128 in CTAs of 3 warps (55 KB of shared memory) so that 4
// fit an SM instead of 3 of 4 warps (74 KB): as many warps per SM in more, smaller CTAs. Qwen3-8B
// on an H200 at ~400-key contexts (docs/benchmarks session 25), ms per decode step: b=128 7.88
// -> 7.73, b=256 12.52 -> 12.24. The FP8 ring's like form, 4 CTAs of 5 warps instead of 5 of 4
// (registers are its limit), measured slower at 256 rows (9.07 -> 9.17) and was not kept.
constexpr int kFourPerSmWarps = 3;
template <int kDim, bool kFp8, int kStages, bool kKeysAsM>
constexpr bool kHasFourPerSmForm =
    kDim == 128 && !kFp8 && kStages == kShallowStages && kKeysAsM;
// CTAs per SM the kernel's registers are bounded for. The shallow FP8 ring (41 KB of shared
// memory at head_dim 128 in 4 warps) leaves registers the limit: about 160 give 3 CTAs, 128 give
// 4 (with 8 bytes spilled); with the keys as M (half the accumulators) 96 give 5 with no spill,
// which shared memory allows too. The bf16 rings fit 3 CTAs of 4 warps per SM at most (or 4 of
// 3), so they keep the compiler's choice (0: no bound).
template <bool kFp8, int kStages, bool kKeysAsM>
constexpr int kMinCtasPerSm = kFp8 && kStages == kShallowStages ? (kKeysAsM ? 5 : 4) : 0;

// Shared memory: the Q tile, then each warp's ring of kStages stages (a warp's tiles in flight;
// bf16: a K and a V tile; FP8: their codes and the tile's K and V scales).
template <int kDim, bool kFp8 = false, int kStages = 3, int kCtaWarps = kWarps>
struct Layout {
  static constexpr int kLd = kDim + kPad;
  static constexpr int kQ = kRows * kLd;         // bf16 of the Q tile
  static constexpr int kTile = kTileKeys * kLd;  // bf16 of one K or V tile
  // Bytes of a code row: 16-byte aligned, padded so that the fragment reads of flash_tile.cuh's
  // FP8 order are free of bank conflicts.
  static constexpr int kCodeLd = kDim + 16;
  static constexpr int kRowBytes = kFp8 ? kCodeLd : kLd * 2;  // a key row in a stage
  static constexpr int kTileBytes = kTileKeys * kRowBytes;    // one K or V tile in a stage
  static constexpr int kStageBytes = 2 * kTileBytes + (kFp8 ? 2 * kTileKeys * 4 : 0);
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int64_t kBytes = int64_t{kQ} * 2 + int64_t{kCtaWarps} * kWarpBytes;
  static constexpr int kRecord = kDim + 2;  // f32 state of one row: m, l, acc[kDim]
  // The warps' states reuse the rings once the key loop is over.
  static_assert(kRows * kRecord * 4 <= kWarpBytes);
  static_assert(kStageBytes % 16 == 0 && kWarpBytes % 16 == 0 && (kQ * 2) % 16 == 0);
};

__device__ __forceinline__ float NaN() { return __int_as_float(0x7fc00000); }

// The grid's (sequence, kv head) pair: x and y, or with decode_kv_heads_first y and x, so that
// a sequence's kv heads run side by side and read the same cache rows (each head a 256-byte run
// of a slot's 2 KB at Qwen3-8B's 8 x 128 bf16 dims, a 128-byte run of 1 KB in FP8) at about the
// same time. Qwen3-8B on an H200, ~400-key contexts (docs/benchmarks session 25), ms per decode
// step: FP8 cache b=128 6.16 -> 6.09, b=256 9.18 -> 9.07; bf16 within noise.
__device__ __forceinline__ int SequenceOf(const PagedAttentionArgs& a) {
  return a.decode_kv_heads_first ? blockIdx.y : blockIdx.x;
}
__device__ __forceinline__ int KvHeadOf(const PagedAttentionArgs& a) {
  return a.decode_kv_heads_first ? blockIdx.x : blockIdx.y;
}

// The sequence's rows belong to this kernel (the same test as RowOf's in attention.cu); the
// flash prefill kernel keeps the sequences it takes.
__device__ __forceinline__ bool DecodeRows(const PagedAttentionArgs& a, int q_len) {
  return KernelForRows(q_len, a.heads / a.kv_heads, a.flash_min_query_len, a.decode_max_rows) ==
         RowKernel::kDecode;
}

// The merged state of one tile row over `count` records `stride` floats apart (m, l, acc):
// merged in record order; a NaN l (bad key) survives.
template <int kDim>
struct RowState {
  static constexpr int kDims = kDim / 8;  // dims per thread: 8 threads share a row
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kDims] = {};

  __device__ void MergeRecords(const float* rec, int count, int64_t stride, int d0) {
    for (int i = 0; i < count; ++i) m = fmaxf(m, rec[i * stride]);
    for (int i = 0; i < count; ++i) {
      const float* r = rec + i * stride;
      const float f = r[0] == -INFINITY ? 0.0f : expf(r[0] - m);
      l = (isnan(l) || isnan(r[1])) ? NaN() : l + r[1] * f;
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] += r[2 + d0 + d] * f;
    }
  }

  __device__ void Store(float* rec, int d0) const {
    if (d0 == 0) rec[0] = m, rec[1] = l;
#pragma unroll
    for (int d = 0; d < kDims; ++d) rec[2 + d0 + d] = acc[d];
  }

  // Tile row `row` of (sequence s, kv head kvh) into out, with the sink in the normaliser.
  __device__ void Finish(const PagedAttentionArgs& a, int s, int kvh, int row, int d0) const {
    const int group = a.heads / a.kv_heads;
    const int q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
    if (row >= q_len * group) return;
    const int i = row / group, t = q0 + i, h = kvh * group + row % group;
    if (t < 0 || t >= a.tokens) return;
    const int pos = a.seq_lens[s] - q_len + i;
    const int first = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
    const float mm = fmaxf(m, sink);
    const float scale = l > 0.0f ? expf(m - mm) : 0.0f;
    float denom = l * scale + (a.sinks != nullptr ? expf(sink - mm) : 0.0f);
    if (isnan(l) || pos < first) denom = NaN();
    const float f = scale / denom;
    bf16* out = static_cast<bf16*>(a.out) + static_cast<int64_t>(t) * a.out_token_stride +
                static_cast<int64_t>(h) * kDim + d0;
#pragma unroll
    for (int d = 0; d < kDims; d += 2) {
      *reinterpret_cast<uint32_t*>(out + d) = PackBf16x2(acc[d] * f, acc[d + 1] * f);
    }
  }
};

// The wide form (PagedAttentionArgs::decode_wide_ctas): a decode graph sizes the split for the
// longest context it may see, so at small batches a ~400-key context's keys spread over 4 CTAs
// and the merge kernel after them (the partial states' round trip through L2) costs about as
// much again (docs/benchmarks sessions 20-22: 7.2 + 5.3 us per layer at b=1). CTAs of 8 warps
// with the deep ring take 512 keys alone (24 tiles in flight per CTA) and finish their rows
// themselves; the merge kernel then has nothing to do. They need 213 KB of shared memory at
// head_dim 128 (bf16), one CTA per SM, so they pay only between about half the SMs' count of
// pairs and a few per SM: Qwen3-8B on an H200, ms per decode step, b=16 5.39 -> 5.14, b=32 5.76
// -> 5.71, but b=1 4.55 -> 4.90 (8 SMs read the context) and b=64 6.26 -> 6.72 (docs/benchmarks
// session 26). The host picks the form by the step's pair count (CudaBackendOptions).

// The sequence's 16-key tiles [first, last] and how many of the grid's CTAs share them: the
// host sizes the grid for the longest sequence a graph may see; shorter ones use fewer CTAs
// (the rest exit, and the merge reads only theirs). Same answer in both kernels.
struct KeyTiles {
  int key_lo = 0, first = 0, last = -1, ctas = 1;
};
__device__ __forceinline__ KeyTiles KeyTilesOf(const PagedAttentionArgs& a, int seq_len,
                                               int q_len) {
  KeyTiles k;
  const int p_hi = seq_len - 1;
  k.key_lo = a.sliding_window > 0 ? max(0, seq_len - q_len - a.sliding_window + 1) : 0;
  k.first = k.key_lo / kTileKeys;
  k.last = p_hi >= k.key_lo ? p_hi / kTileKeys : k.first - 1;
  const int tiles = k.last - k.first + 1;
  const int min_tiles = DecodeMinTilesPerCta(a.decode_wide_ctas);  // as the host's split
  k.ctas = min(a.decode_ctas_per_head, max(1, (tiles + min_tiles - 1) / min_tiles));
  return k;
}

__device__ __forceinline__ float* PartialsOf(const PagedAttentionArgs& a, int s, int kvh,
                                             int record) {
  return a.decode_partials +
         ((static_cast<int64_t>(s) * a.kv_heads + kvh) * a.decode_ctas_per_head) * kRows * record;
}

template <int kDim, bool kFp8, int kStages, bool kKeysAsM, int kCtaWarps>
__global__ void __launch_bounds__(kCtaWarps * kWarpSize,
                                  (kMinCtasPerSm<kFp8, kStages, kKeysAsM>))
    DecodeAttentionKernel(const __grid_constant__ PagedAttentionArgs a) {
  // PdlBegin comes once the tiles of keys before this step's rows are in flight (below).
  using L = Layout<kDim, kFp8, kStages, kCtaWarps>;
  constexpr int kCtaThreads = kCtaWarps * kWarpSize;
  // The merge at the end gives each output row 8 threads.
  static_assert(kCtaThreads >= 8 * (kKeysAsM ? kDecodeKeysAsMRows : kRows));
  constexpr int kLd = L::kLd;
  constexpr int kVecs = kDim / 8;  // 16-byte vectors per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  unsigned char* rings = smem_raw + L::kQ * 2;
  __shared__ uint32_t bad_keys[kCtaWarps][kStages];  // bit j: key j of the stage's tile is bad

  const int s = SequenceOf(a), kvh = KvHeadOf(a), z = blockIdx.z;
  const int group = a.heads / a.kv_heads;
  const int q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
  // CTAs that do nothing still wait before they exit (pdl.cuh: the chain of waits).
  if (!DecodeRows(a, q_len)) return PdlWait();  // uniform across the CTA
  const int rows = q_len * group;
  const int seq_len = a.seq_lens[s], context = seq_len - q_len;
  const int p_hi = seq_len - 1;
  const KeyTiles tiles = KeyTilesOf(a, seq_len, q_len);
  if (z >= tiles.ctas) return PdlWait();  // uniform; the merge does not read this CTA
  const int key_lo = tiles.key_lo;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, q4 = lane % 4;

  // This warp's tiles: t_first + wg, + stride, ... up to t_last.
  const int t_first = tiles.first, t_last = tiles.last;
  const int stride = tiles.ctas * kCtaWarps;
  const int wg = z * kCtaWarps + warp;
  const int n_tiles = t_first + wg <= t_last ? (t_last - t_first - wg) / stride + 1 : 0;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.block_table_stride;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * kDim;
  unsigned char* ring = rings + warp * L::kWarpBytes;  // [kStages][stage]
  const auto first_key = [&](int n) { return (t_first + wg + n * stride) * kTileKeys; };  // tile n

  // Tile n of this warp into stage n % kStages; keys outside [key_lo, p_hi] or of a bad block
  // are zero-filled and flagged. With the block size a multiple of the tile (the default 16) the
  // tile lies in one block: one broadcast table read, row addresses by a constant stride.
  // Otherwise lane j < 16 resolves key j's block and the copies take it by shuffle.
  constexpr int kElem = kFp8 ? 1 : 2;         // bytes per cached element
  constexpr int kRowVecs = kDim * kElem / 16;  // 16-byte copies per key row
  constexpr int kKeysPerPass = kWarpSize / kRowVecs;
  const int64_t row_bytes = slot_elems * kElem;  // one slot's rows of every kv head
  const auto* k_src = static_cast<const unsigned char*>(a.k_cache) + kvh * kDim * kElem;
  const auto* v_src = static_cast<const unsigned char*>(a.v_cache) + kvh * kDim * kElem;
  const bool tile_in_one_block = a.block_size % kTileKeys == 0;  // uniform
  const auto issue = [&](int n) {
    const int k0 = first_key(n);
    unsigned char* stage = ring + (n % kStages) * L::kStageBytes;
    // The tile's keys in range: j in [j_lo, j_hi].
    const int j_lo = max(0, key_lo - k0), j_hi = min(kTileKeys - 1, p_hi - k0);
    const uint32_t in_range = ((2u << j_hi) - 1u) & ~((1u << j_lo) - 1u);
    int block = -1;  // one block: the tile's; else key `lane`'s (lane < 16)
    uint32_t bad_mask;
    if (tile_in_one_block) {
      const int entry = k0 / a.block_size;
      block = entry < a.block_table_width ? table[entry] : -1;
      const bool bad = block < 0 || block >= a.num_blocks;
      if (bad) block = -1;
      bad_mask = bad ? in_range : 0u;
    } else {
      bool bad = false;
      if (((in_range >> lane) & 1u) != 0) {  // lane < 16
        const int entry = (k0 + lane) / a.block_size;
        block = entry < a.block_table_width ? table[entry] : -1;
        if (block < 0 || block >= a.num_blocks) bad = true, block = -1;
      }
      bad_mask = __ballot_sync(kFullMask, bad);
    }
    if (lane == 0) bad_keys[warp][n % kStages] = bad_mask;
    // The slot of tile key j (the block of key j known to be valid).
    const auto slot_of = [&](int b, int j) {
      return static_cast<int64_t>(b) * a.block_size + (k0 + j) % a.block_size;
    };
    if (kFp8 && lane < kTileKeys) {  // FP8 scales: lane j < 16 copies key j's
      const int b = tile_in_one_block ? (((in_range >> lane) & 1u) != 0 ? block : -1) : block;
      const int64_t at = b >= 0 ? slot_of(b, lane) * a.kv_heads + kvh : 0;
      float* scales = reinterpret_cast<float*>(stage + 2 * L::kTileBytes);
      CpAsync4(scales + lane, a.k_scale + at, b >= 0 ? 4 : 0);
      CpAsync4(scales + kTileKeys + lane, a.v_scale + at, b >= 0 ? 4 : 0);
    }
    // Rows of codes (FP8) or bf16, 16 bytes per copy: pass p covers kKeysPerPass whole rows.
    const int c = lane % kRowVecs;
    unsigned char* dst = stage + (lane / kRowVecs) * L::kRowBytes + c * 16;
    if (tile_in_one_block) {
      const int64_t base = block >= 0 ? slot_of(block, 0) * row_bytes + c * 16 : 0;
#pragma unroll
      for (int p = 0; p < kTileKeys / kKeysPerPass; ++p) {
        const int key = p * kKeysPerPass + lane / kRowVecs;
        const bool ok = block >= 0 && ((in_range >> key) & 1u) != 0;
        const int64_t off = ok ? base + key * row_bytes : 0;
        CpAsync16(dst + p * kKeysPerPass * L::kRowBytes, k_src + off, ok ? 16 : 0);
        CpAsync16(dst + L::kTileBytes + p * kKeysPerPass * L::kRowBytes, v_src + off,
                  ok ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int p = 0; p < kTileKeys / kKeysPerPass; ++p) {
        const int key = p * kKeysPerPass + lane / kRowVecs;
        const int b = __shfl_sync(kFullMask, block, key);
        const int64_t off = b >= 0 ? slot_of(b, key) * row_bytes + c * 16 : 0;
        CpAsync16(dst + p * kKeysPerPass * L::kRowBytes, k_src + off, b >= 0 ? 16 : 0);
        CpAsync16(dst + L::kTileBytes + p * kKeysPerPass * L::kRowBytes, v_src + off,
                  b >= 0 ? 16 : 0);
      }
    }
  };

  // The first kStages tiles fill the ring. Those whose keys all precede this step's rows were
  // written by earlier steps, whose kernels completed before the previous kernel let this one
  // launch (it waits, then triggers: pdl.cuh), so they load before PdlWait, overlapping the
  // previous kernel's tail; the query and the new keys are its output and load after it.
  int issued = 0;
  for (; issued < kStages && issued < n_tiles; ++issued) {
    const int k0 = first_key(issued);
    if (min(k0 + kTileKeys - 1, p_hi) >= context) break;  // holds a key of this step's rows
    issue(issued);
    CpAsyncCommit();
  }
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  for (; issued < kStages; ++issued) {
    if (issued < n_tiles) issue(issued);
    CpAsyncCommit();  // empty groups too: the wait below counts groups
  }

  // Tile row r: new row r / group, query head kvh * group + r % group; zeros past `rows`.
  for (int i = threadIdx.x; i < kRows * kVecs; i += kCtaThreads) {
    const int r = i / kVecs, c = i % kVecs, t = q0 + r / group;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows && t >= 0 && t < a.tokens) {
      const bf16* q = static_cast<const bf16*>(a.q) + static_cast<int64_t>(t) * a.q_token_stride +
                      static_cast<int64_t>(kvh * group + r % group) * kDim;
      v = *reinterpret_cast<const uint4*>(q + c * 8);
    }
    *reinterpret_cast<uint4*>(q_s + r * kLd + c * 8) = v;
  }
  __syncthreads();
  // The keys every row sees, [rows_lo, rows_hi]: a tile inside it with no bad key needs no mask.
  // (Rows past `rows` have a zero query; their state is never written out.)
  const int rows_hi = context;
  const int rows_lo = a.sliding_window > 0 ? max(0, p_hi - a.sliding_window + 1) : 0;
  const float scale = a.scale * kLog2e;  // scores in log2 units (exp2: one MUFU op)
  // The thread's tile rows (row form: g and g + 8; keys as M: query columns 2 q4 and 2 q4 + 1):
  // positions and first keys (rows past `rows` see none).
  int pos[2], first[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = kKeysAsM ? 2 * q4 + r : g + 8 * r;
    pos[r] = row < rows ? context + row / group : -1;
    first[r] = a.sliding_window > 0 ? max(0, pos[r] - a.sliding_window + 1) : 0;
  }
  // The warps' states once the key loop is over, in the rings: [kCtaWarps][kRows][kRecord].
  constexpr int kRecord = L::kRecord;
  float* states = reinterpret_cast<float*>(rings);

  if constexpr (kKeysAsM) {
    uint32_t qb[kDim / 16][2];
    LoadQueryColumns<kDim, kLd, kFp8>(qb, q_s, lane);
    float ot[kDim / 16][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    bool bad[2] = {false, false};
    for (int n = 0; n < n_tiles; ++n) {
      CpAsyncWait<kStages - 1>();  // tile n's group has landed (kStages + n groups committed)
      __syncwarp();                // ... for every lane's copies
      const unsigned char* stage = ring + (n % kStages) * L::kStageBytes;
      const float* tile_scales = reinterpret_cast<const float*>(stage + 2 * L::kTileBytes);
      const uint32_t key_bad = bad_keys[warp][n % kStages];
      const int k0 = first_key(n);
      float st[4] = {};
      if constexpr (kFp8) {
        KeysAsMScoresFp8<kDim>(st, qb, stage, L::kCodeLd, lane);
      } else {
        KeysAsMScores<kDim, kLd>(st, qb, reinterpret_cast<const bf16*>(stage), lane);
      }
      float col_max[2] = {-INFINITY, -INFINITY};
      const bool whole = key_bad == 0 && k0 >= rows_lo && k0 + kTileKeys - 1 <= rows_hi;
      KeysAsMScaleAndMask<kFp8>(st, col_max, whole, k0, first, pos, key_bad, bad, scale,
                                tile_scales, g);
      KeysAsMSoftmaxUpdate<kDim>(st, col_max, m, l, ot);
      if constexpr (kFp8) {
        KeysAsMAccumulateFp8<kDim>(ot, st, stage + L::kTileBytes, L::kCodeLd,
                                   tile_scales + kTileKeys, lane);
      } else {
        KeysAsMAccumulate<kDim, kLd>(ot, st, reinterpret_cast<const bf16*>(stage) + L::kTile,
                                     lane);
      }
      __syncwarp();  // the stage is read before the issue below overwrites it
      if (n + kStages < n_tiles) issue(n + kStages);
      CpAsyncCommit();
    }
    CpAsyncWait<0>();
    // A column is bad when any of its keys is, and its sum is the lanes' partial sums: both over
    // the 8 lanes of the column.
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      bad[c] = ColumnAny(bad[c]);
      l[c] = ColumnSum(l[c]);
    }
    __syncthreads();  // every warp is done with its ring
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float* rec = states + (warp * kRows + 2 * q4 + c) * kRecord;
      if (g == 0) rec[0] = m[c] * kLn2, rec[1] = bad[c] ? NaN() : l[c];
#pragma unroll
      for (int mt = 0; mt < kDim / 16; ++mt) {
        rec[2 + KeysAsMOutputDim<kDim, kFp8>(mt, c, g)] = ot[mt][c];
        rec[2 + KeysAsMOutputDim<kDim, kFp8>(mt, c + 2, g)] = ot[mt][c + 2];
      }
    }
  } else {
    uint32_t qa[kDim / 16][4];
    if constexpr (kFp8) {
      LoadQueryFragmentsFp8Order<kDim, kLd>(qa, q_s, lane);
    } else {
      LoadQueryFragments<kDim, kLd>(qa, q_s, lane);
    }
    float o[kDim / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    bool bad[2] = {false, false};
    for (int n = 0; n < n_tiles; ++n) {
      CpAsyncWait<kStages - 1>();  // tile n's group has landed (kStages + n groups committed)
      __syncwarp();                // ... for every lane's copies
      const unsigned char* stage = ring + (n % kStages) * L::kStageBytes;
      // FP8: the tile's 16 keys' K scales, then their V scales.
      const float* tile_scales = reinterpret_cast<const float*>(stage + 2 * L::kTileBytes);
      const uint32_t key_bad = bad_keys[warp][n % kStages];
      const int k0 = first_key(n);

      float sc[2][4] = {};
      if constexpr (kFp8) {
        TileScoresFp8<kDim, 2>(sc, qa, stage, L::kCodeLd, lane);
      } else {
        TileScores<kDim, 2, kLd>(sc, qa, reinterpret_cast<const bf16*>(stage), lane);
      }
      // sc[nt][e]: tile row g + 8 * (e / 2), key k0 + nt * 8 + 2 * q4 + e % 2.
      float tile_max[2] = {-INFINITY, -INFINITY};
      const bool whole = key_bad == 0 && k0 >= rows_lo && k0 + kTileKeys - 1 <= rows_hi;
      ScaleAndMaskScores<2, kFp8>(sc, tile_max, whole, k0, first, pos, key_bad, bad, scale,
                                  tile_scales, q4);
      OnlineSoftmaxUpdate<2, kDim, /*kBase2=*/true>(sc, tile_max, m, l, o);
      if constexpr (kFp8) {
        AccumulatePVFp8<kDim>(o, sc, stage + L::kTileBytes, L::kCodeLd, tile_scales + kTileKeys,
                              lane);
      } else {
        AccumulatePV<2, kDim, kLd>(o, sc, reinterpret_cast<const bf16*>(stage) + L::kTile, lane);
      }
      __syncwarp();  // the stage is read before the issue below overwrites it
      if (n + kStages < n_tiles) issue(n + kStages);
      CpAsyncCommit();
    }
    CpAsyncWait<0>();
    // A row is bad when any of its keys is: the 4 lanes of the row saw different keys.
    for (bool& b : bad) b = QuadAny(b);
    __syncthreads();  // every warp is done with its ring
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float* rec = states + (warp * kRows + g + 8 * r) * kRecord;
      // m back in natural units: the merges and Finish work in those.
      if (q4 == 0) rec[0] = m[r] * kLn2, rec[1] = bad[r] ? NaN() : l[r];
#pragma unroll
      for (int dt = 0; dt < kDim / 8; ++dt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int column = 2 * q4 + e;
          rec[2 + (kFp8 ? Fp8OutputDim(dt, column) : dt * 8 + column)] = o[dt][2 * r + e];
        }
      }
    }
  }
  __syncthreads();
  const int row = threadIdx.x / 8, d0 = (threadIdx.x % 8) * (kDim / 8);
  if (row >= rows) return;  // no output (keys as M: no record past kDecodeKeysAsMRows either)
  RowState<kDim> st;
  st.MergeRecords(states + row * kRecord, kCtaWarps, int64_t{kRows} * kRecord, d0);
  if (tiles.ctas == 1) {
    st.Finish(a, s, kvh, row, d0);
  } else {
    st.Store(PartialsOf(a, s, kvh, kRecord) + (int64_t{z} * kRows + row) * kRecord, d0);
  }
}

// One CTA per (sequence, kv head): merges the states of the CTAs that shared its keys, in CTA
// order (a sequence one CTA covered was finished by it).
template <int kDim>
__global__ void __launch_bounds__(kThreads)
    MergeDecodeKernel(const __grid_constant__ PagedAttentionArgs a) {
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  constexpr int kRecord = Layout<kDim>::kRecord;
  const int s = SequenceOf(a), kvh = KvHeadOf(a);
  const int q_len = a.query_start[s + 1] - a.query_start[s];
  if (!DecodeRows(a, q_len)) return;
  const KeyTiles tiles = KeyTilesOf(a, a.seq_lens[s], q_len);
  if (tiles.ctas == 1) return;
  const int row = threadIdx.x / 8, d0 = (threadIdx.x % 8) * (kDim / 8);
  if (row >= q_len * (a.heads / a.kv_heads)) return;  // no output, and maybe no record
  RowState<kDim> st;
  st.MergeRecords(PartialsOf(a, s, kvh, kRecord) + row * kRecord, tiles.ctas,
                  int64_t{kRows} * kRecord, d0);
  st.Finish(a, s, kvh, row, d0);
}

template <int kDim, bool kFp8, int kStages, bool kKeysAsM, int kCtaWarps = kWarps>
cudaError_t LaunchDecode(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr auto kernel = DecodeAttentionKernel<kDim, kFp8, kStages, kKeysAsM, kCtaWarps>;
  constexpr int64_t kSmem = Layout<kDim, kFp8, kStages, kCtaWarps>::kBytes;
  if (const cudaError_t err = AllowDynamicSharedMemory<kernel>(kSmem); err != cudaSuccess) {
    return err;
  }
  // The shallow ring's point is more CTAs per SM (bf16 at head_dim 128: 3 x 74 KB, or 4 x 55 KB
  // in the four-per-SM form), which needs the largest carveout; the driver's own pick is not
  // guaranteed to be it.
  if constexpr (kStages == kShallowStages) {
    if (const cudaError_t err = PreferMaxSharedCarveout<kernel>(); err != cudaSuccess) return err;
  }
  const auto ctas = static_cast<unsigned>(a.decode_ctas_per_head);
  const auto seqs = static_cast<unsigned>(a.num_seqs), heads = static_cast<unsigned>(a.kv_heads);
  const dim3 grid(a.decode_kv_heads_first ? heads : seqs, a.decode_kv_heads_first ? seqs : heads,
                  ctas);
  if (const cudaError_t err = LaunchMaybePdl(kernel, grid, kCtaWarps * kWarpSize,
                                             static_cast<size_t>(kSmem), stream, a.pdl, a);
      err != cudaSuccess) {
    return err;
  }
  if (ctas > 1) {
    const dim3 merge_grid(grid.x, grid.y);
    return LaunchMaybePdl(MergeDecodeKernel<kDim>, merge_grid, kThreads, 0, stream, a.pdl, a);
  }
  return cudaGetLastError();
}

template <bool kFp8, int kStages, bool kKeysAsM>
cudaError_t LaunchForHeadDim(const PagedAttentionArgs& a, cudaStream_t stream) {
  if constexpr (kStages == kDeepStages && kKeysAsM) {
    if (a.decode_wide_ctas) {
      constexpr int kW = kDecodeWideWarps;
      return a.head_dim == 64 ? LaunchDecode<64, kFp8, kStages, kKeysAsM, kW>(a, stream)
                              : LaunchDecode<128, kFp8, kStages, kKeysAsM, kW>(a, stream);
    }
  }
  if (a.head_dim == 64) return LaunchDecode<64, kFp8, kStages, kKeysAsM>(a, stream);
  if constexpr (kHasFourPerSmForm<128, kFp8, kStages, kKeysAsM>) {
    if (a.decode_four_ctas_per_sm) {
      return LaunchDecode<128, kFp8, kStages, kKeysAsM, kFourPerSmWarps>(a, stream);
    }
  }
  return LaunchDecode<128, kFp8, kStages, kKeysAsM>(a, stream);
}

template <bool kFp8, bool kKeysAsM>
cudaError_t LaunchForStages(const PagedAttentionArgs& a, cudaStream_t stream) {
  const bool shallow = int64_t{a.num_seqs} * a.kv_heads >= kShallowMinPairs;
  return shallow ? LaunchForHeadDim<kFp8, kShallowStages, kKeysAsM>(a, stream)
                 : LaunchForHeadDim<kFp8, kDeepStages, kKeysAsM>(a, stream);
}

}  // namespace

bool DecodeAttentionSupports(int head_dim, int heads, int kv_heads) {
  return (head_dim == 64 || head_dim == 128) && kv_heads > 0 && heads % kv_heads == 0 &&
         heads / kv_heads <= kDecodeTileRows;
}

int64_t DecodePartialFloats(int num_seqs, int kv_heads, int head_dim, int ctas) {
  return int64_t{num_seqs} * kv_heads * ctas * kRows * (head_dim + 2);
}

cudaError_t LaunchDecodeAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.num_seqs == 0 || args.decode_max_rows < 1) return cudaSuccess;
  if (args.decode_max_rows > kDecodeTileRows || args.decode_ctas_per_head < 1 ||
      args.decode_ctas_per_head > 65535 ||
      (args.decode_ctas_per_head > 1 && args.decode_partials == nullptr) ||
      !DecodeAttentionSupports(args.head_dim, args.heads, args.kv_heads)) {
    return cudaErrorInvalidValue;
  }
  if ((args.k_scale == nullptr) != (args.v_scale == nullptr)) return cudaErrorInvalidValue;
  if (args.decode_keys_as_m && args.decode_max_rows > kDecodeKeysAsMRows) {
    return cudaErrorInvalidValue;
  }
  const bool fp8 = args.k_scale != nullptr;
  // The kv heads first puts the sequences on the grid's y, which holds at most 65535.
  PagedAttentionArgs a = args;
  a.decode_kv_heads_first = args.decode_kv_heads_first && args.num_seqs <= 65535;
  if (a.decode_keys_as_m) {
    return fp8 ? LaunchForStages<true, true>(a, stream) : LaunchForStages<false, true>(a, stream);
  }
  return fp8 ? LaunchForStages<true, false>(a, stream) : LaunchForStages<false, false>(a, stream);
}

}  // namespace xserv::kernels::cuda
