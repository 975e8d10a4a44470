// Prefill attention on tensor cores (FlashAttention-2 style) over the paged KV cache, for the
// sequences of a step with at least kFlashMinQueryLen new rows; PagedAttentionKernel skips those
// rows (attention.cu). GQA, sliding windows and per-head sinks as there.
//
// Tile: one CTA of 4 warps per (64 query rows of one sequence, query head). The rows' Q tile is
// staged in shared memory once and kept as mma.sync A fragments (16 rows per warp). Keys are
// walked in tiles of 64 from the window's first key to the last row's position: the K and V rows
// are gathered through the block table into shared memory (zeros past the range), then per warp
//   S = Q K^T          m16n8k16 bf16 MMAs, fp32 scores, scaled and masked (causal + window);
//   online softmax     row max / sum over the 4 threads holding a row (quad shuffles);
//   O += P V           P rounded to bf16 as A fragments straight from the S accumulators,
//                      V fragments by ldmatrix.trans.
// The sink joins the normaliser at the end; a row with a bad block-table entry among its own keys
// comes out NaN (as in attention.cu). fp32 state; a row's result depends only on its
// sequence (not on the batch), but differs in rounding from PagedAttentionKernel's, so the
// batch-invariant mode does not use this kernel.
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

template <int kDim>
__global__ void __launch_bounds__(kFlashThreads)
    FlashPrefillKernel(const __grid_constant__ PagedAttentionArgs a) {
  constexpr int kLd = kDim + kPad;
  constexpr int kVecs = kDim / 8;  // 16-byte vectors per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [kTileRows][kLd]
  bf16* k_s = q_s + kTileRows * kLd;              // [kTileKeys][kLd]
  bf16* v_s = k_s + kTileKeys * kLd;              // [kTileKeys][kLd]
  __shared__ bool key_bad[kTileKeys];  // the tile's key j - k0 has a bad block-table entry

  // This CTA's sequence and tile: the flash sequences' tiles in sequence order.
  int s = -1, tile = blockIdx.x;
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
  if (s < 0) return;  // past the last tile: uniform across the CTA
  const int h = blockIdx.y;
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
  float o[kDim / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  bool bad[2] = {false, false};  // a key the row sees has a bad block-table entry

  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.block_table_stride;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * kDim;
  const bf16* k_cache = static_cast<const bf16*>(a.k_cache) + kv_head * kDim;
  const bf16* v_cache = static_cast<const bf16*>(a.v_cache) + kv_head * kDim;
  for (int k0 = key_lo / kTileKeys * kTileKeys; k0 <= p_hi; k0 += kTileKeys) {
    __syncthreads();  // the previous tile's K and V are consumed
    for (int i = threadIdx.x; i < kTileKeys * kVecs; i += kFlashThreads) {
      const int r = i / kVecs, c = i % kVecs, j = k0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      bool key_is_bad = false;
      if (j >= key_lo && j <= p_hi) {
        const int entry = j / a.block_size;
        const int block = entry < a.block_table_width ? table[entry] : -1;
        if (block < 0 || block >= a.num_blocks) {
          key_is_bad = true;
        } else {
          const int64_t slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
          kv = *reinterpret_cast<const uint4*>(k_cache + slot * slot_elems + c * 8);
          vv = *reinterpret_cast<const uint4*>(v_cache + slot * slot_elems + c * 8);
        }
      }
      *reinterpret_cast<uint4*>(k_s + r * kLd + c * 8) = kv;
      *reinterpret_cast<uint4*>(v_s + r * kLd + c * 8) = vv;
      if (c == 0) key_bad[r] = key_is_bad;
    }
    __syncthreads();

    // Scores of the warp's 16 rows against the tile's 64 keys: 8 n8 tiles.
    float sc[kTileKeys / 8][4] = {};
    TileScores<kDim, kTileKeys / 8, kLd>(sc, qa, k_s, lane);
    // Scale and mask; sc[nt][e]: row g + 8 * (e / 2), key k0 + nt * 8 + 2 * q4 + e % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, key = k0 + nt * 8 + 2 * q4 + e % 2;
        const bool valid = key >= first[r] && key <= pos[r];
        bad[r] = bad[r] || (valid && key_bad[key - k0]);
        sc[nt][e] = valid ? sc[nt][e] * a.scale : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], sc[nt][e]);
      }
    }
    OnlineSoftmaxUpdate<kTileKeys / 8, kDim>(sc, tile_max, m, l, o);
    AccumulatePV<kTileKeys / 8, kDim, kLd>(o, sc, v_s, lane);
  }
  // A row is bad when any of its keys is: the 4 lanes of the row saw different keys.
  for (bool& b : bad) b = QuadAny(b);

  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  bf16* out_rows = static_cast<bf16*>(a.out) + static_cast<int64_t>(q0 + row0) *
                                                   a.out_token_stride +
                   static_cast<int64_t>(h) * kDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = warp * 16 + g + 8 * r;
    if (i >= rows) continue;
    const float mm = fmaxf(m[r], sink);
    const float scale = l[r] > 0.0f ? expf(m[r] - mm) : 0.0f;
    float denom = l[r] * scale + (a.sinks != nullptr ? expf(sink - mm) : 0.0f);
    if (bad[r] || pos[r] < first[r]) denom = __int_as_float(0x7fc00000);
    const float f = scale / denom;
    bf16* out = out_rows + static_cast<int64_t>(i) * a.out_token_stride + 2 * q4;
#pragma unroll
    for (int dt = 0; dt < kDim / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(out + dt * 8) =
          PackBf16x2(o[dt][2 * r] * f, o[dt][2 * r + 1] * f);
    }
  }
}

template <int kDim>
cudaError_t LaunchFlash(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr int64_t kSmem = int64_t{kTileRows + 2 * kTileKeys} * (kDim + kPad) * 2;
  if (const cudaError_t err = AllowDynamicSharedMemory<FlashPrefillKernel<kDim>>(kSmem);
      err != cudaSuccess) {
    return err;
  }
  // Each flash sequence (>= flash_min_query_len rows) adds at most one partly filled tile to the
  // tokens / 64 full ones.
  const int flash_seqs = std::min(a.num_seqs, a.tokens / a.flash_min_query_len);
  const dim3 grid(static_cast<unsigned>((a.tokens + kTileRows - 1) / kTileRows + flash_seqs),
                  static_cast<unsigned>(a.heads));
  FlashPrefillKernel<kDim><<<grid, kFlashThreads, static_cast<size_t>(kSmem), stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool FlashPrefillSupports(int head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchFlashPrefill(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.heads == 0 || args.flash_min_query_len < 1) return cudaSuccess;
  if (args.head_dim == 64) return LaunchFlash<64>(args, stream);
  if (args.head_dim == 128) return LaunchFlash<128>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace xserv::kernels::cuda
