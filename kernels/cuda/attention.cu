// Paged causal attention for mixed batches (prefill chunks + decode rows), GQA, sliding windows
// and per-head sinks. The simple correct kernel; the performance issue replaces the tile, not the
// interface (PagedAttentionArgs stays the plan-free per-layer view).
//
// Tile: one CTA of kWarps warps per (query row t, query head h); grid (tokens, heads).
//   q_reg   [kChunks] per lane  fp32 q[d] * scale, d = lane + 32 * c
//   warp w  keys j = first + w, first + w + kWarps, ... <= pos (strided over the warp's keys)
//   state   per warp: running max m, normaliser l, acc[kChunks] per lane (online softmax, fp32)
//   merge   smem [kWarps] of (m, l, acc[head_dim]) combined in warp order -> deterministic
// The row's sequence comes from a binary search of query_start; its position is
// pos = seq_len - q_len + (t - query_start[s]), keys [first, pos] with first = pos - window + 1.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(const __grid_constant__ PagedAttentionArgs a) {
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kChunks * kWarpSize];
  const int t = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;

  // Sequence s owns rows [query_start[s], query_start[s + 1]): the last s with start <= t.
  int lo = 0, hi = a.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.query_start[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int s = lo;
  const int q_len = a.query_start[s + 1] - a.query_start[s];
  const int pos = a.seq_lens[s] - q_len + (t - a.query_start[s]);
  const int first = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int kv_head = h / (a.heads / a.kv_heads);
  const int32_t* table = a.block_tables + s * a.block_table_stride;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const bf16* k_cache = static_cast<const bf16*>(a.k_cache) + kv_head * a.head_dim;
  const bf16* v_cache = static_cast<const bf16*>(a.v_cache) + kv_head * a.head_dim;

  const bf16* q = static_cast<const bf16*>(a.q) + t * a.q_token_stride +
                  static_cast<int64_t>(h) * a.head_dim;
  float q_reg[kChunks], acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = lane + c * kWarpSize;
    q_reg[c] = d < a.head_dim ? ToFloat(q[d]) * a.scale : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  bool bad = pos < first || pos < 0;
  for (int j = first + warp; j <= pos; j += kWarps) {
    const int entry = j / a.block_size;
    const int block = entry < a.block_table_width ? table[entry] : -1;
    if (block < 0 || block >= a.num_blocks) {
      bad = true;
      continue;
    }
    const int64_t slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
    const bf16* k = k_cache + slot * slot_elems;
    const bf16* v = v_cache + slot * slot_elems;
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + c * kWarpSize;
      if (d < a.head_dim) dot += q_reg[c] * ToFloat(k[d]);
    }
    const float score = WarpSum(dot);  // identical on every lane
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);  // m = -inf on the first key: 0
    const float p = expf(score - m_new);
    l = l * correction + p;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + c * kWarpSize;
      acc[c] = acc[c] * correction + (d < a.head_dim ? p * ToFloat(v[d]) : 0.0f);
    }
    m = m_new;
  }

  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) s_acc[warp][lane + c * kWarpSize] = acc[c];
  bad = __syncthreads_or(bad);  // publishes the warp states and agrees on validity

  // Merge the warps (and the sink, a logit with a zero value row) in a fixed order.
  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  float m_all = sink;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = a.sinks != nullptr ? expf(sink - m_all) : 0.0f;
  float weight[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = s_l[w] > 0.0f ? expf(s_m[w] - m_all) : 0.0f;  // idle warps have m = -inf
    l_all += s_l[w] * weight[w];
  }
  bf16* out = static_cast<bf16*>(a.out) + t * a.out_token_stride +
              static_cast<int64_t>(h) * a.head_dim;
  const float inv_l = bad ? __int_as_float(0x7fc00000) : 1.0f / l_all;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += s_acc[w][d] * weight[w];
    out[d] = FromFloat<bf16>(o * inv_l);
  }
}

template <int kChunks>
cudaError_t Launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.heads));
  PagedAttentionKernel<kChunks><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.heads == 0) return cudaSuccess;
  // Closed dispatch set over dims per lane; head_dim <= 32 * kChunks.
  if (args.head_dim <= 32) return Launch<1>(args, stream);
  if (args.head_dim <= 64) return Launch<2>(args, stream);
  if (args.head_dim <= 128) return Launch<4>(args, stream);
  if (args.head_dim <= kMaxHeadDim) return Launch<8>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace xserv::kernels::cuda
