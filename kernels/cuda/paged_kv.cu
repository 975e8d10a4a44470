// Paged KV write: each new token's keys and values go to their cache slot.
//
// Tile: one 128-thread CTA per token. bf16 cache: threads over the slot's kv_heads * head_dim
// elements. FP8 cache: a warp per kv head (K, then V), lane l holding columns l + 32 j, reduces
// the head's amax and stores its codes and scale (fp8_codes.cuh StoreFp8Head).
// A slot outside the pool (padding, or a bug the host could not see without a sync) is skipped,
// never written out of bounds.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/paged_kv.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;

__global__ void __launch_bounds__(kThreads) WriteKvKernel(const __grid_constant__ WriteKvArgs a) {
  const int64_t t = blockIdx.x;
  const int32_t slot = a.slots[t];
  if (slot < 0 || slot >= a.num_slots) return;
  const bf16* k = static_cast<const bf16*>(a.k) + t * a.k_token_stride;
  const bf16* v = static_cast<const bf16*>(a.v) + t * a.v_token_stride;
  const int64_t slot_elems = int64_t{a.kv_heads} * a.head_dim;  // one token's keys in the cache
  bf16* kc = static_cast<bf16*>(a.k_cache) + static_cast<int64_t>(slot) * slot_elems;
  bf16* vc = static_cast<bf16*>(a.v_cache) + static_cast<int64_t>(slot) * slot_elems;
  for (int64_t i = threadIdx.x; i < slot_elems; i += kThreads) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

__global__ void __launch_bounds__(kThreads)
    WriteKvFp8Kernel(const __grid_constant__ WriteKvArgs a) {
  constexpr int kPerLane = kMaxHeadDim / kWarpSize;
  const int64_t t = blockIdx.x;
  const int32_t slot = a.slots[t];
  if (slot < 0 || slot >= a.num_slots) return;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  // Warp w takes (tensor, head) items w, w + kWarps, ...: K heads first, then V heads.
  for (int item = warp; item < 2 * a.kv_heads; item += kWarps) {
    const bool is_v = item >= a.kv_heads;
    const int head = is_v ? item - a.kv_heads : item;
    const bf16* x = static_cast<const bf16*>(is_v ? a.v : a.k) +
                    t * (is_v ? a.v_token_stride : a.k_token_stride) +
                    static_cast<int64_t>(head) * a.head_dim;
    float v[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int col = lane + kWarpSize * j;
      v[j] = col < a.head_dim ? ToFloat(x[col]) : 0.0f;
    }
    const int64_t at = static_cast<int64_t>(slot) * a.kv_heads + head;
    StoreFp8Head(v, a.head_dim, static_cast<uint8_t*>(is_v ? a.v_cache : a.k_cache) + at * a.head_dim,
                 (is_v ? a.v_scale : a.k_scale) + at);
  }
}

}  // namespace

cudaError_t LaunchWriteKv(const WriteKvArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return cudaSuccess;
  if (args.k_scale != nullptr) {
    if (args.head_dim < 1 || args.head_dim > kMaxHeadDim || args.v_scale == nullptr) {
      return cudaErrorInvalidValue;
    }
    WriteKvFp8Kernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  } else {
    WriteKvKernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
