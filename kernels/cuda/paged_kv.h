// Launcher of the paged KV write (paged_kv.cu). Host API only; CudaBackend validates first
// (ops_attention.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

struct WriteKvArgs {
  const void* k = nullptr;  // bf16 [tokens, kv_heads * head_dim] (token-strided)
  const void* v = nullptr;
  int64_t k_token_stride = 0;
  int64_t v_token_stride = 0;
  int64_t tokens = 0;
  int kv_heads = 0;
  int head_dim = 0;                // FP8: <= kMaxHeadDim
  const int32_t* slots = nullptr;  // [tokens]; slots outside [0, num_slots) are skipped
  void* k_cache = nullptr;  // bf16 [num_blocks * block_size, kv_heads * head_dim]; FP8: E4M3 codes
  void* v_cache = nullptr;
  int64_t num_slots = 0;
  // FP8 cache (kernels::KvLayer): f32 [num_slots, kv_heads] scales, set together; null: bf16.
  float* k_scale = nullptr;
  float* v_scale = nullptr;
};

cudaError_t LaunchWriteKv(const WriteKvArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
