// Launcher of the rotary-embedding kernel (rope.cu). Host API only; CudaBackend validates first
// (ops_attention.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::kernels::cuda {

struct RopeArgs {
  void* x = nullptr;              // bf16 [tokens, heads, head_dim], heads packed, rotated in place
  int64_t token_stride = 0;       // elements between tokens
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;               // even
  const int32_t* positions = nullptr;  // [tokens]
  const float* cos_sin = nullptr;      // f32 [max_positions, head_dim]: cos | sin halves
  int64_t max_positions = 0;           // positions outside [0, max) poison the token with NaN
};

// NeoX (rotate-half) layout: (x1, x2) = (x[i], x[i + half]) -> (x1 c - x2 s, x2 c + x1 s).
cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
