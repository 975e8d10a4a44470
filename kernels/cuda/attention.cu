// Paged causal attention for mixed batches (prefill chunks + decode rows), GQA, sliding windows
// and per-head sinks.
//
// Keys are cut into fixed splits of kSplitKeys positions ([z * S, (z + 1) * S)). Each split is
// reduced to a partial softmax state (max m, normaliser l, unnormalised output acc), and the
// splits of a row are merged left to right with one merge function. Where the splits run (one
// CTA each, merged by a second kernel, for batches too small to fill the GPU; or one after the
// other inside the row's CTA) does not change a bit of the result, so a row's output does not
// depend on the batch it runs in.
//
// Tile: a CTA of kWarps warps per (query row t, group of kWarps query heads); each warp owns one
// query head and walks its split 32 keys at a time:
//   scores  lane j takes key j of the tile: q (fp32, scaled, in shared memory) · k_j over
//           head_dim, 16-byte loads; warp max / sum give the tile's softmax terms
//   values  lane owns head_dim / 32 consecutive dims: acc += p_j * v_j for the tile's 32 keys
// Many independent loads per lane per tile keep HBM latency hidden (the first kernel walked one
// key at a time per warp and was latency-bound).
// The row's sequence comes from a binary search of query_start; its position is
// pos = seq_len - q_len + (t - query_start[s]), keys [first, pos] with first = pos - window + 1.
// An FP8 cache (kFp8) is read as codes, 16 per 16-byte load: a key's dot product is taken over
// its codes and multiplied by the key's scale; value codes are decoded times their scale.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

__device__ __forceinline__ float NaN() { return __int_as_float(0x7fc00000); }

// Partial softmax state of one split (or of several merged); a lane holds its dims of acc.
// l is NaN when the split met a bad block-table entry: NaN then survives every merge.
template <int kChunks>
struct State {
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kChunks] = {};
};

// state := state (+) part, with both rescaled to the larger max.
template <int kChunks>
__device__ __forceinline__ void Merge(State<kChunks>& state, const State<kChunks>& part) {
  const float m = fmaxf(state.m, part.m);
  const float a = state.l > 0.0f ? expf(state.m - m) : 0.0f;
  const float b = part.l > 0.0f ? expf(part.m - m) : 0.0f;
  state.l = (isnan(state.l) || isnan(part.l)) ? NaN() : state.l * a + part.l * b;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) state.acc[c] = state.acc[c] * a + part.acc[c] * b;
  state.m = m;
}

struct Row {
  int s = 0, pos = 0, first = 0;
  bool bad = false;
  bool flash = false;   // the tensor-core prefill kernel computes this row
  bool decode = false;  // the GQA-packed decode kernel computes this row
};

__device__ Row RowOf(const PagedAttentionArgs& a, int t) {
  // Sequence s owns rows [query_start[s], query_start[s + 1]): the last s with start <= t.
  int lo = 0, hi = a.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.query_start[mid] <= t) lo = mid; else hi = mid - 1;
  }
  Row r;
  r.s = lo;
  const int q_len = a.query_start[r.s + 1] - a.query_start[r.s];
  r.pos = a.seq_lens[r.s] - q_len + (t - a.query_start[r.s]);
  r.first = a.sliding_window > 0 ? max(0, r.pos - a.sliding_window + 1) : 0;
  r.bad = r.pos < r.first || r.pos < 0;
  // Only rows inside their sequence's range (bad query_start may leave some outside).
  const bool inside = t < a.query_start[r.s + 1];
  const RowKernel kernel =
      KernelForRows(q_len, a.heads / a.kv_heads, a.flash_min_query_len, a.decode_max_rows);
  r.flash = inside && kernel == RowKernel::kFlash;
  r.decode = inside && kernel == RowKernel::kDecode;
  return r;
}

// Dot of the scaled query (shared memory, fp32) with one bf16 key row, dims in order. kDim > 0:
// head_dim known at compile time, so every 16-byte load of the row is issued before the first
// use (memory-level parallelism is what a decode tile lives on).
template <int kDim>
__device__ __forceinline__ float Dot(const float* q, const bf16* k, int head_dim) {
  float dot = 0.0f;
  if constexpr (kDim > 0) {
    uint4 raw[kDim / 8];
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i) raw[i] = reinterpret_cast<const uint4*>(k)[i];
    // q from shared memory four floats at a time (every lane reads the same address: one
    // broadcast per 4 dims instead of per dim).
    const float4* q4 = reinterpret_cast<const float4*>(q);
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i) {
      const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw[i]);
      const float4 qa = q4[2 * i], qb = q4[2 * i + 1];
      const float2 f0 = __bfloat1622float2(pair[0]), f1 = __bfloat1622float2(pair[1]);
      const float2 f2 = __bfloat1622float2(pair[2]), f3 = __bfloat1622float2(pair[3]);
      dot += qa.x * f0.x;
      dot += qa.y * f0.y;
      dot += qa.z * f1.x;
      dot += qa.w * f1.y;
      dot += qb.x * f2.x;
      dot += qb.y * f2.y;
      dot += qb.z * f3.x;
      dot += qb.w * f3.y;
    }
  } else if (head_dim % 8 == 0) {
    for (int d = 0; d < head_dim; d += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(k + d);
      const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(pair[i]);
        dot += q[d + 2 * i] * f.x;
        dot += q[d + 2 * i + 1] * f.y;
      }
    }
  } else {
    for (int d = 0; d < head_dim; ++d) dot += q[d] * ToFloat(k[d]);
  }
  return dot;
}

// Dot of the scaled query with one FP8 key row's codes (the caller applies the row's scale). kDim
// > 0: a multiple of 16 known at compile time, the row 16-byte aligned.
template <int kDim>
__device__ __forceinline__ float DotFp8(const float* q, const uint8_t* k, int head_dim) {
  float dot = 0.0f;
  if constexpr (kDim > 0) {
    static_assert(kDim % 16 == 0);
    uint4 raw[kDim / 16];
#pragma unroll
    for (int i = 0; i < kDim / 16; ++i) raw[i] = reinterpret_cast<const uint4*>(k)[i];
    const float4* q4 = reinterpret_cast<const float4*>(q);
#pragma unroll
    for (int i = 0; i < kDim / 16; ++i) {
      const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&raw[i]);  // 8 pairs, 16 dims
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float4 qa = q4[4 * i + p];
        const float2 f0 = Fp8Pair(pairs[2 * p]), f1 = Fp8Pair(pairs[2 * p + 1]);
        dot += qa.x * f0.x;
        dot += qa.y * f0.y;
        dot += qa.z * f1.x;
        dot += qa.w * f1.y;
      }
    }
  } else {
    for (int d = 0; d < head_dim; ++d) dot += q[d] * Fp8Value(k[d]);
  }
  return dot;
}

// A lane's kChunks consecutive dims of one value row (zeros past head_dim).
template <int kChunks, bool kExact>
__device__ __forceinline__ void LoadDims(const bf16* v, int d0, int head_dim, float* out) {
  if constexpr (kExact && kChunks % 2 == 0) {
    const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(v + d0);
#pragma unroll
    for (int c = 0; c < kChunks / 2; ++c) {
      const float2 f = __bfloat1622float2(pair[c]);
      out[2 * c] = f.x;
      out[2 * c + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) out[c] = d0 + c < head_dim ? ToFloat(v[d0 + c]) : 0.0f;
  }
}

// LoadDims of an FP8 value row: codes times the row's scale. kExact: the row 16-byte aligned.
template <int kChunks, bool kExact>
__device__ __forceinline__ void LoadDimsFp8(const uint8_t* v, int d0, int head_dim, float scale,
                                            float* out) {
  if constexpr (kExact && kChunks >= 2) {
    alignas(8) uint16_t pairs[kChunks / 2];  // kChunks codes, kChunks-aligned (d0 = lane * kChunks)
    if constexpr (kChunks == 8) {
      *reinterpret_cast<uint2*>(pairs) = *reinterpret_cast<const uint2*>(v + d0);
    } else if constexpr (kChunks == 4) {
      *reinterpret_cast<uint32_t*>(pairs) = *reinterpret_cast<const uint32_t*>(v + d0);
    } else {
      pairs[0] = *reinterpret_cast<const uint16_t*>(v + d0);
    }
#pragma unroll
    for (int c = 0; c < kChunks / 2; ++c) {
      const float2 f = Fp8Pair(pairs[c]);
      out[2 * c] = f.x * scale;
      out[2 * c + 1] = f.y * scale;
    }
  } else {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      out[c] = d0 + c < head_dim ? Fp8Value(v[d0 + c]) * scale : 0.0f;
    }
  }
}

// One kv head's view of the cache: its rows' first elements (bf16, or FP8 codes), and with FP8
// its scales (row r's at scale[r * kv_heads]).
struct KvHeadRows {
  const void* k = nullptr;
  const void* v = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

template <bool kFp8>
__device__ __forceinline__ KvHeadRows KvHeadRowsOf(const PagedAttentionArgs& a, int kv_head) {
  const int64_t offset = static_cast<int64_t>(kv_head) * a.head_dim;
  if constexpr (kFp8) {
    return {static_cast<const uint8_t*>(a.k_cache) + offset,
            static_cast<const uint8_t*>(a.v_cache) + offset, a.k_scale + kv_head,
            a.v_scale + kv_head};
  } else {
    return {static_cast<const bf16*>(a.k_cache) + offset,
            static_cast<const bf16*>(a.v_cache) + offset, nullptr, nullptr};
  }
}

// The warp's query head over keys [lo, hi] (one split clipped to the row's range).
template <int kChunks, bool kExact, bool kFp8>
__device__ State<kChunks> Split(const PagedAttentionArgs& a, const Row& row, const float* q,
                                const KvHeadRows& kv, int lo, int hi) {
  const int lane = threadIdx.x % kWarpSize;
  const int32_t* table = a.block_tables + row.s * a.block_table_stride;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  State<kChunks> st;
  bool bad = false;
  for (int base = lo; base <= hi; base += kWarpSize) {
    const int j = base + lane;
    int64_t slot = -1;
    if (j <= hi) {
      const int entry = j / a.block_size;
      const int block = entry < a.block_table_width ? table[entry] : -1;
      if (block < 0 || block >= a.num_blocks) {
        bad = true;
      } else {
        slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
      }
    }
    float score = -INFINITY;
    if (slot >= 0) {
      constexpr int kDim = kExact ? kChunks * kWarpSize : 0;
      if constexpr (kFp8) {
        score = DotFp8<kDim>(q, static_cast<const uint8_t*>(kv.k) + slot * slot_elems,
                             a.head_dim) *
                kv.k_scale[slot * a.kv_heads];
      } else {
        score = Dot<kDim>(q, static_cast<const bf16*>(kv.k) + slot * slot_elems, a.head_dim);
      }
    }
    const float m_new = fmaxf(st.m, WarpMax(score));
    if (m_new == -INFINITY) continue;  // nothing valid yet (uniform across the warp)
    const float p = slot >= 0 ? expf(score - m_new) : 0.0f;
    const float correction = expf(st.m - m_new);  // st.m = -inf on the first tile: 0
    st.l = st.l * correction + WarpSum(p);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) st.acc[c] *= correction;
    // Values: 8 keys' rows loaded before they are used, then added in key order.
    const int d0 = lane * kChunks;
    constexpr int kUnroll = 8;
    for (int i0 = 0; i0 < kWarpSize && base + i0 <= hi; i0 += kUnroll) {
      float p_u[kUnroll];
      float v_u[kUnroll][kChunks];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p_u[u] = __shfl_sync(kFullMask, p, i0 + u);
        const int64_t si = __shfl_sync(kFullMask, slot, i0 + u);
        if (si >= 0 && kFp8) {
          LoadDimsFp8<kChunks, kExact>(static_cast<const uint8_t*>(kv.v) + si * slot_elems, d0,
                                       a.head_dim, kv.v_scale[si * a.kv_heads], v_u[u]);
        } else if (si >= 0) {
          LoadDims<kChunks, kExact>(static_cast<const bf16*>(kv.v) + si * slot_elems, d0,
                                    a.head_dim, v_u[u]);
        } else {
#pragma unroll
          for (int c = 0; c < kChunks; ++c) v_u[u][c] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) st.acc[c] += p_u[u] * v_u[u][c];
      }
    }
    st.m = m_new;
  }
  if (__any_sync(kFullMask, bad)) st.l = NaN();
  return st;
}

// Output of a merged state: the sink (a logit with a zero value row) joins the normaliser.
template <int kChunks>
__device__ void Finish(const PagedAttentionArgs& a, int t, int h, const State<kChunks>& st,
                       bool bad) {
  const int lane = threadIdx.x % kWarpSize;
  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  const float m = fmaxf(st.m, sink);
  const float scale = st.l > 0.0f ? expf(st.m - m) : 0.0f;
  float l = st.l * scale + (a.sinks != nullptr ? expf(sink - m) : 0.0f);
  if (bad || isnan(st.l)) l = NaN();
  bf16* out = static_cast<bf16*>(a.out) + t * a.out_token_stride +
              static_cast<int64_t>(h) * a.head_dim;
  const float inv_l = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = lane * kChunks + c;
    if (d < a.head_dim) out[d] = FromFloat<bf16>(st.acc[c] * scale * inv_l);
  }
}

__device__ __forceinline__ float* PartialOf(const PagedAttentionArgs& a, int t, int h, int z) {
  const int64_t record = a.head_dim + 2;
  return a.partials + ((static_cast<int64_t>(t) * a.heads + h) * a.num_splits + z) * record;
}

template <int kChunks, bool kExact, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(const __grid_constant__ PagedAttentionArgs a) {
  __shared__ __align__(16) float s_q[kWarps][kChunks * kWarpSize];
  const int t = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int h = blockIdx.y * kWarps + warp;
  if (h >= a.heads) return;  // whole warps; no CTA barrier below
  const Row row = RowOf(a, t);
  if (row.flash || row.decode) return;
  const KvHeadRows kv = KvHeadRowsOf<kFp8>(a, h / (a.heads / a.kv_heads));
  const bf16* q = static_cast<const bf16*>(a.q) + t * a.q_token_stride +
                  static_cast<int64_t>(h) * a.head_dim;
  float* q_s = s_q[warp];
  for (int d = lane; d < a.head_dim; d += kWarpSize) q_s[d] = ToFloat(q[d]) * a.scale;
  __syncwarp();

  const int first_split = row.bad ? 0 : row.first / kSplitKeys;
  const int last_split = row.bad ? -1 : row.pos / kSplitKeys;
  if (a.partials != nullptr) {  // one split per CTA; MergeSplitsKernel finishes the row
    const int z = blockIdx.z;
    if (z < first_split || z > last_split) return;
    const State<kChunks> st =
        Split<kChunks, kExact, kFp8>(a, row, q_s, kv, max(row.first, z * kSplitKeys),
                                     min(row.pos, z * kSplitKeys + kSplitKeys - 1));
    float* rec = PartialOf(a, t, h, z);
    if (lane == 0) rec[0] = st.m, rec[1] = st.l;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane * kChunks + c;
      if (d < a.head_dim) rec[2 + d] = st.acc[c];
    }
    return;
  }
  State<kChunks> st;
  for (int z = first_split; z <= last_split; ++z) {
    const State<kChunks> part =
        Split<kChunks, kExact, kFp8>(a, row, q_s, kv, max(row.first, z * kSplitKeys),
                                     min(row.pos, z * kSplitKeys + kSplitKeys - 1));
    if (z == first_split) {
      st = part;
    } else {
      Merge(st, part);
    }
  }
  Finish(a, t, h, st, row.bad);
}

// One warp per (row, head): merges the row's split partials left to right, as the single-CTA path
// does.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    MergeSplitsKernel(const __grid_constant__ PagedAttentionArgs a) {
  const int t = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int h = blockIdx.y * kWarps + warp;
  if (h >= a.heads) return;
  const Row row = RowOf(a, t);
  if (row.flash || row.decode) return;
  // A row beyond the splits the grid covered (metadata the host's max_seq_len did not describe)
  // has no partials: NaN, like any bad metadata.
  const bool bad = row.bad || row.pos / kSplitKeys >= a.num_splits;
  State<kChunks> st;
  if (!bad) {
    for (int z = row.first / kSplitKeys; z <= row.pos / kSplitKeys; ++z) {
      const float* rec = PartialOf(a, t, h, z);
      State<kChunks> part;
      part.m = rec[0];
      part.l = rec[1];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = lane * kChunks + c;
        part.acc[c] = d < a.head_dim ? rec[2 + d] : 0.0f;
      }
      if (z == row.first / kSplitKeys) {
        st = part;
      } else {
        Merge(st, part);
      }
    }
  }
  Finish(a, t, h, st, bad);
}

template <int kChunks>
cudaError_t Launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  const bool exact = a.head_dim == kChunks * kWarpSize;
  const unsigned head_groups = static_cast<unsigned>((a.heads + kWarps - 1) / kWarps);
  const bool split_grid = a.partials != nullptr;
  const dim3 grid(static_cast<unsigned>(a.tokens), head_groups,
                  split_grid ? static_cast<unsigned>(a.num_splits) : 1u);
  const bool fp8 = a.k_scale != nullptr;
  if (exact && fp8) {
    PagedAttentionKernel<kChunks, true, true><<<grid, kThreads, 0, stream>>>(a);
  } else if (exact) {
    PagedAttentionKernel<kChunks, true, false><<<grid, kThreads, 0, stream>>>(a);
  } else if (fp8) {
    PagedAttentionKernel<kChunks, false, true><<<grid, kThreads, 0, stream>>>(a);
  } else {
    PagedAttentionKernel<kChunks, false, false><<<grid, kThreads, 0, stream>>>(a);
  }
  if (split_grid) {
    const dim3 merge_grid(static_cast<unsigned>(a.tokens), head_groups);
    MergeSplitsKernel<kChunks><<<merge_grid, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens == 0 || args.heads == 0) return cudaSuccess;
  if (args.partials != nullptr && args.num_splits < 1) return cudaErrorInvalidValue;
  if ((args.k_scale == nullptr) != (args.v_scale == nullptr)) return cudaErrorInvalidValue;
  // Closed dispatch set over dims per lane; head_dim <= 32 * kChunks.
  if (args.head_dim <= 32) return Launch<1>(args, stream);
  if (args.head_dim <= 64) return Launch<2>(args, stream);
  if (args.head_dim <= 128) return Launch<4>(args, stream);
  if (args.head_dim <= kMaxHeadDim) return Launch<8>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace xserv::kernels::cuda
