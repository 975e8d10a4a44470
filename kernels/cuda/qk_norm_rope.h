// Launcher of the fused per-head RMSNorm + rotary embedding + KV write (qk_norm_rope.cu). Host API
// only; CudaBackend validates first (ops_attention.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

struct QkNormRopeArgs {
  void* q = nullptr;  // bf16 [tokens, q_heads, head_dim], heads packed; normed and rotated in place
  int64_t q_token_stride = 0;
  void* k = nullptr;  // bf16 [tokens, kv_heads, head_dim]; in place, then cached
  int64_t k_token_stride = 0;
  const void* v = nullptr;  // bf16 [tokens, kv_heads, head_dim]; cached as is
  int64_t v_token_stride = 0;
  int64_t tokens = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;                 // QkNormRopeSupports
  const void* q_norm = nullptr;     // bf16 [head_dim], with k_norm; null: no norm
  const void* k_norm = nullptr;
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [tokens]
  const float* cos_sin = nullptr;      // f32 [max_positions, head_dim]; null: no rotation
  int64_t max_positions = 0;           // positions outside [0, max) poison q and k with NaN
  const int32_t* slots = nullptr;      // [tokens]; outside [0, num_slots): not cached
  void* k_cache = nullptr;             // bf16 [num_slots, kv_heads * head_dim]; FP8: E4M3 codes
  void* v_cache = nullptr;
  int64_t num_slots = 0;
  float* k_scale = nullptr;  // FP8 cache (kernels::KvLayer): f32 [num_slots, kv_heads], with v_scale
  float* v_scale = nullptr;
  bool pdl = false;  // launch with programmatic dependent launch (pdl.cuh)
};

// head_dim a multiple of 64 up to 256: a lane's columns c = lane + 32 j then hold both halves of
// their rotation pairs.
bool QkNormRopeSupports(int head_dim);
cudaError_t LaunchQkNormRopeWriteKv(const QkNormRopeArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
