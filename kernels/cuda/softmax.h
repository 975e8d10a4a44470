// Launchers of the f32 row-softmax family (softmax.cu): log-softmax of logits and the MoE router's
// top-k + softmax. Host API only; CudaBackend validates first (ops_softmax.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// Router top-k supports at most this many experts (a warp holds the row in registers).
inline constexpr int kMaxRouterExperts = 1024;

// f32 rows: out = x - logsumexp(x). out may alias x.
cudaError_t LaunchLogSoftmax(const RowsView& x, const RowsView& out, cudaStream_t stream);
// ArgMax splits each row into chunks of this many columns, one CTA each, and merges their
// partial results (ArgMaxScratchBytes of scratch; none when a row is one chunk).
inline constexpr int64_t kArgMaxChunk = 2048;
struct ArgMaxPartial {
  float value;
  int32_t index;  // -1: the chunk held only NaN
};
int64_t ArgMaxScratchBytes(int64_t rows, int64_t cols);
// ids[r] = arg-max of f32 row r (ties: lowest index; NaN skipped; all-NaN row: 0). Rows of at
// most 65535 chunks (134 M columns).
cudaError_t LaunchArgMax(const RowsView& x, int32_t* ids, void* scratch, cudaStream_t stream);
// logits f32 [T, E] rows; ids i32 [T, k] and weights f32 [T, k] contiguous. Ties pick the lower
// expert id; weights are the softmax over the k selected logits.
cudaError_t LaunchRouterTopK(const RowsView& logits, int k, int32_t* ids, float* weights,
                             cudaStream_t stream, bool pdl = false);

}  // namespace xserv::kernels::cuda
