// Launcher of paged attention over a mixed batch (attention.cu). Host API only; CudaBackend
// validates shapes first (ops_attention.cc). The batch metadata is read on the device, so one
// launch serves prefill chunks and decode rows together, and no host work happens per layer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

// Supported head_dim: any even value up to kMaxHeadDim (a warp lane owns head_dim / 32 rounded up
// dims, dispatched over kHeadDimChunks).
inline constexpr int kMaxHeadDim = 256;

// Keys are reduced in fixed splits of this many positions (attention.cu); a row's result does not
// depend on whether its splits ran in parallel CTAs or in one.
inline constexpr int kSplitKeys = 64;

// The paged-KV view of one layer and one step. Trivially copyable; passed as __grid_constant__.
struct PagedAttentionArgs {
  const void* q = nullptr;    // bf16 [tokens, heads, head_dim], heads packed
  int64_t q_token_stride = 0;
  void* out = nullptr;        // bf16 [tokens, heads, head_dim], heads packed
  int64_t out_token_stride = 0;
  const void* k_cache = nullptr;  // bf16 [num_blocks, block_size, kv_heads, head_dim]; FP8: codes
  const void* v_cache = nullptr;
  // FP8 cache (kernels::KvLayer): f32 [num_blocks * block_size, kv_heads], set together, and
  // k_cache / v_cache hold E4M3 codes; null: a bf16 cache. Every kernel here reads either.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;      // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride]
  int64_t block_table_stride = 0;
  int block_table_width = 0;              // entries per row that may be read
  const float* sinks = nullptr;           // f32 [heads] or null
  int tokens = 0;
  int num_seqs = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int num_blocks = 0;
  int sliding_window = 0;  // > 0: keys in (pos - window, pos]
  float scale = 1.0f;
  // Split grid (null: each row's splits run inside its CTA): f32 records of (m, l, acc[head_dim])
  // for [tokens, heads, num_splits], num_splits = ceil(max_seq_len / kSplitKeys); a second kernel
  // merges them.
  float* partials = nullptr;
  int num_splits = 0;
  // > 0: the rows of sequences with at least this many new rows belong to LaunchFlashPrefill
  // (flash_attention.cu); LaunchPagedAttention leaves them alone.
  int flash_min_query_len = 0;
  // > 0: the rows of sequences whose new rows times the query heads per kv head number at most
  // this (<= kDecodeTileRows), and that the flash kernel does not take, belong to
  // LaunchDecodeAttention (decode_attention.cu); PagedAttentionKernel leaves them alone.
  int decode_max_rows = 0;
  // CTAs that share the keys of one (sequence, kv head) in LaunchDecodeAttention; above 1 they
  // write f32 partial states [num_seqs, kv_heads, ctas, kDecodeTileRows, head_dim + 2] to
  // decode_partials, merged by a second kernel.
  int decode_ctas_per_head = 1;
  float* decode_partials = nullptr;
  // LaunchDecodeAttention multiplies with the keys as the MMAs' M dimension (keys_as_m_tile.cuh):
  // half the MMAs and accumulators for tiles of at most kDecodeKeysAsMRows rows (decode_max_rows
  // must be at most that).
  bool decode_keys_as_m = false;
  // ... and, for a bf16 cache with the shallow ring at head_dim 128, in CTAs of 3 warps so that
  // 4 fit an SM (decode_attention.cu, kFourPerSmWarps).
  bool decode_four_ctas_per_sm = false;
  // ... with a sequence's kv heads adjacent in the grid (decode_attention.cu, SequenceOf), for
  // steps of at most 65535 sequences (the grid's y limit; more keep the other order).
  bool decode_kv_heads_first = false;
  // ... with the keys as M, in CTAs of kDecodeWideWarps warps that each take at least
  // kDecodeWideMinTilesPerCta tiles before the keys spread over more CTAs (instead of
  // kDecodeMinTilesPerCta): for steps of few (sequence, kv head) pairs, whose short contexts then
  // need no partial states and no merge (decode_attention.cu says why).
  bool decode_wide_ctas = false;
  bool pdl = false;  // the decode kernels launch with programmatic dependent launch (pdl.cuh)
};

// Sequences with at least this many new rows go to the tensor-core prefill kernel when enabled.
inline constexpr int kFlashMinQueryLen = 16;

// Which kernel computes the rows of a sequence with `q_len` new rows and `group` query heads per
// kv head, given the launch's thresholds (0: that kernel is off): the one rule the kernels
// (attention.cu, flash_attention.cu, decode_attention.cu) and the host's launch decisions share.
enum class RowKernel { kPaged, kFlash, kDecode };
__host__ __device__ inline RowKernel KernelForRows(int q_len, int group, int flash_min_query_len,
                                                   int decode_max_rows) {
  if (flash_min_query_len > 0 && q_len >= flash_min_query_len) return RowKernel::kFlash;
  if (decode_max_rows > 0 && q_len >= 1 && q_len * group <= decode_max_rows) {
    return RowKernel::kDecode;
  }
  return RowKernel::kPaged;
}

// Causal attention of every query row over its sequence's cached keys and values. Rows whose
// metadata points outside the pool come out NaN (the host cannot check device metadata cheaply).
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

// Tensor-core attention (FlashAttention-2 style) for the rows of sequences with at least
// args.flash_min_query_len new rows; head_dim 64 or 128 (FlashPrefillSupports). q and out rows
// 16-byte aligned. Same semantics and NaN rules as LaunchPagedAttention.
bool FlashPrefillSupports(int head_dim);
cudaError_t LaunchFlashPrefill(const PagedAttentionArgs& args, cudaStream_t stream);

// Decode attention on tensor cores with the query heads of a kv head grouped (GQA packing): one
// kv head's keys and values are read once for all its query heads and the sequence's few new
// rows (decode, short speculative chunks). Rows: new rows x (heads / kv_heads) <= 16.
inline constexpr int kDecodeTileRows = 16;
// The rows of a tile with the keys as M (PagedAttentionArgs::decode_keys_as_m).
inline constexpr int kDecodeKeysAsMRows = 8;
// Key tiles (16 keys) up to which the host gives a (sequence, kv head) one CTA (its 4 warps take
// up to 3 tiles each) instead of splitting the keys over CTAs whose states a second kernel merges.
inline constexpr int kDecodeOneCtaTiles = 12;
// The tiles a CTA takes at least before the keys of a (sequence, kv head) spread over more CTAs
// (2 per warp of 4), and the same for the wide form (PagedAttentionArgs::decode_wide_ctas): 4 per
// warp of 8, so one CTA covers 512 keys.
inline constexpr int kDecodeMinTilesPerCta = 8;
inline constexpr int kDecodeWideWarps = 8;
inline constexpr int kDecodeWideMinTilesPerCta = 32;
// The host's split and the kernel's KeyTilesOf both take this.
constexpr int DecodeMinTilesPerCta(bool wide_ctas) {
  return wide_ctas ? kDecodeWideMinTilesPerCta : kDecodeMinTilesPerCta;
}
bool DecodeAttentionSupports(int head_dim, int heads, int kv_heads);
// Partial-state floats LaunchDecodeAttention needs for `ctas` CTAs per (sequence, kv head).
int64_t DecodePartialFloats(int num_seqs, int kv_heads, int head_dim, int ctas);
cudaError_t LaunchDecodeAttention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
