// Paged KV write: each new token's keys and values go to their cache slot.
//
// Tile: one 128-thread CTA per token, threads over the slot's kv_heads * head_dim elements.
// A slot outside the pool (padding, or a bug the host could not see without a sync) is skipped,
// never written out of bounds.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_kv.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) WriteKvKernel(const __grid_constant__ WriteKvArgs a) {
  const int64_t t = blockIdx.x;
  const int32_t slot = a.slots[t];
  if (slot < 0 || slot >= a.num_slots) return;
  const bf16* k = static_cast<const bf16*>(a.k) + t * a.k_token_stride;
  const bf16* v = static_cast<const bf16*>(a.v) + t * a.v_token_stride;
  bf16* kc = static_cast<bf16*>(a.k_cache) + static_cast<int64_t>(slot) * a.slot_elems;
  bf16* vc = static_cast<bf16*>(a.v_cache) + static_cast<int64_t>(slot) * a.slot_elems;
  for (int64_t i = threadIdx.x; i < a.slot_elems; i += kThreads) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

}  // namespace

cudaError_t LaunchWriteKv(const WriteKvArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return cudaSuccess;
  WriteKvKernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
