// The attention block's step between the projections and attention in one kernel: per-head
// RMSNorm of q and k (Qwen3's q_norm / k_norm), rotary embedding of both, and the paged KV write
// of k and v. Unfused that is five launches per layer (RmsNorm x2, Rope x2, WriteKv), each a few
// microseconds of ramp for a few kilobytes of work at decode.
//
// Tile: a 128-thread CTA per (token, group of 4 heads): each warp takes one of the token's q or k
// heads, and the token's CTAs share the copy of v (at batch 1 the 40 heads of Qwen3-8B then run
// on 10 SMs at once instead of one after another in one CTA). A warp holds a head in registers, lane l owning columns l + 32 j exactly as the
// unfused RmsNorm's short-row kernel does (norm.cu), with the same sum order and roundings:
// bf16 after the norm, bf16 after the rotation (rope.cu's arithmetic), so the result is
// bit-identical to the separate ops. head_dim % 64 == 0 puts both columns of a rotation pair
// (i, i + head_dim / 2) in the same lane. An FP8 cache gets codes and scales from the warp of
// each k head, which also quantises the v head of the same index (as WriteKv's FP8 kernel).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/qk_norm_rope.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

template <int kPerLane>  // head_dim / 32
__global__ void __launch_bounds__(kThreads)
    QkNormRopeWriteKvKernel(const __grid_constant__ QkNormRopeArgs a) {
  constexpr int kDim = kPerLane * kWarpSize;
  constexpr int kHalfLanes = kPerLane / 2;  // j < kHalfLanes: first halves of the pairs
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int32_t slot = a.slots[t];
  const bool cached = slot >= 0 && slot < a.num_slots;
  const bool fp8 = a.k_scale != nullptr;
  const int64_t slot_elems = static_cast<int64_t>(a.kv_heads) * kDim;
  const float* cs = nullptr;
  bool valid_pos = true;
  if (a.cos_sin != nullptr) {
    const int32_t pos = a.positions[t];
    valid_pos = pos >= 0 && pos < a.max_positions;
    cs = a.cos_sin + (valid_pos ? static_cast<int64_t>(pos) * kDim : 0);
  }
  const int h = blockIdx.y * kWarps + warp;
  const bool is_q = h < a.q_heads;
  const bf16* w = static_cast<const bf16*>(is_q ? a.q_norm : a.k_norm);
  // The norm weight and this position's rotation first: constants and host inputs, so their
  // loads overlap the previous kernel (PDL) instead of following the head's load.
  float wn[kPerLane], cosines[kHalfLanes], sines[kHalfLanes];
  const bool working = h < a.q_heads + a.kv_heads;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    wn[j] = working && w != nullptr ? ToFloat(w[lane + kWarpSize * j]) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kHalfLanes; ++j) {
    const int i = lane + kWarpSize * j;
    cosines[j] = working && cs != nullptr ? cs[i] : 0.0f;
    sines[j] = working && cs != nullptr ? cs[kDim / 2 + i] : 0.0f;
  }
  PdlBegin();  // pdl.cuh: the previous kernel's outputs (q, k, v) are ready from here
  if (working) {
    const int head = is_q ? h : h - a.q_heads;
    bf16* x = is_q ? static_cast<bf16*>(a.q) + t * a.q_token_stride + head * kDim
                   : static_cast<bf16*>(a.k) + t * a.k_token_stride + head * kDim;
    float v[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = ToFloat(x[lane + kWarpSize * j]);
    if (w != nullptr) {
      float sum_sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) sum_sq += v[j] * v[j];
      sum_sq = WarpSum(sum_sq);
      const float inv = RmsInv(sum_sq, kDim, a.eps);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) v[j] = ToFloat(FromFloat<bf16>(wn[j] * (v[j] * inv)));
    }
    if (cs != nullptr) {
#pragma unroll
      for (int j = 0; j < kHalfLanes; ++j) {
        if (!valid_pos) {
          v[j] = v[j + kHalfLanes] = ToFloat(QuietNaN<bf16>());
          continue;
        }
        const float2 r = RotatePair(v[j], v[j + kHalfLanes], cosines[j], sines[j]);
        v[j] = ToFloat(FromFloat<bf16>(r.x));
        v[j + kHalfLanes] = ToFloat(FromFloat<bf16>(r.y));
      }
    }
    bf16* kc = !is_q && cached && !fp8
                   ? static_cast<bf16*>(a.k_cache) + slot * slot_elems + head * kDim
                   : nullptr;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const bf16 out = FromFloat<bf16>(v[j]);
      x[lane + kWarpSize * j] = out;
      if (kc != nullptr) kc[lane + kWarpSize * j] = out;
    }
    if (!is_q && cached && fp8) {
      // v[] holds bf16 values (every stage above rounds): the k head as stored in x.
      const int64_t at = static_cast<int64_t>(slot) * a.kv_heads + head;
      StoreFp8Head(v, kDim, static_cast<uint8_t*>(a.k_cache) + at * kDim, a.k_scale + at);
      const bf16* vt = static_cast<const bf16*>(a.v) + t * a.v_token_stride + head * kDim;
      float values[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) values[j] = ToFloat(vt[lane + kWarpSize * j]);
      StoreFp8Head(values, kDim, static_cast<uint8_t*>(a.v_cache) + at * kDim, a.v_scale + at);
    }
  }
  if (!cached || fp8) return;
  const bf16* vt = static_cast<const bf16*>(a.v) + t * a.v_token_stride;
  bf16* vc = static_cast<bf16*>(a.v_cache) + slot * slot_elems;
  for (int64_t i = int64_t{blockIdx.y} * kThreads + threadIdx.x; i < slot_elems;
       i += int64_t{gridDim.y} * kThreads) {
    vc[i] = vt[i];
  }
}

}  // namespace

bool QkNormRopeSupports(int head_dim) {
  return head_dim > 0 && head_dim % 64 == 0 && head_dim <= 256;
}

cudaError_t LaunchQkNormRopeWriteKv(const QkNormRopeArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return cudaSuccess;
  if ((args.k_scale == nullptr) != (args.v_scale == nullptr)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(args.tokens),
                  static_cast<unsigned>((args.q_heads + args.kv_heads + kWarps - 1) / kWarps));
  const dim3 block(kThreads);
  switch (args.head_dim) {
    case 64: return LaunchMaybePdl(QkNormRopeWriteKvKernel<2>, grid, block, 0, stream, args.pdl, args);
    case 128: return LaunchMaybePdl(QkNormRopeWriteKvKernel<4>, grid, block, 0, stream, args.pdl, args);
    case 192: return LaunchMaybePdl(QkNormRopeWriteKvKernel<6>, grid, block, 0, stream, args.pdl, args);
    case 256: return LaunchMaybePdl(QkNormRopeWriteKvKernel<8>, grid, block, 0, stream, args.pdl, args);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace xserv::kernels::cuda
