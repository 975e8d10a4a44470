// Launcher of the sparse mixture-of-experts kernel (moe.cu) for dense bf16 expert weights.
// Host API only; CudaBackend validates first (ops_moe.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

struct ExpertsArgs {
  RowsView x;    // bf16 [tokens, hidden]
  RowsView out;  // bf16 [tokens, hidden]; must not alias x
  const int32_t* ids = nullptr;  // [tokens, k]; ids outside [0, experts) poison the row (NaN)
  const float* weights = nullptr;  // [tokens, k]
  int k = 0;
  const void* gate_up = nullptr;       // bf16 [experts, 2 * inter, hidden]; gate/up interleave
  const void* gate_up_bias = nullptr;  // bf16 [experts, 2 * inter]
  const void* down = nullptr;          // bf16 [experts, hidden, inter]
  const void* down_bias = nullptr;     // bf16 [experts, hidden]
  int experts = 0;
  int hidden = 0;
  int inter = 0;
  float limit = 7.0f;
  float alpha = 1.702f;
};

// Dynamic shared memory the kernel needs: fp32 x row, activation and accumulator.
inline int64_t ExpertsSharedBytes(int64_t hidden, int64_t inter) {
  return (2 * hidden + inter) * static_cast<int64_t>(sizeof(float));
}
// Upper bound on ExpertsSharedBytes (opt-in shared memory per CTA on sm_90).
inline constexpr int64_t kMaxExpertsSharedBytes = 227 * 1024;

cudaError_t LaunchExperts(const ExpertsArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
