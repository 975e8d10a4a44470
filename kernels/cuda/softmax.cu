// Row softmax kernels over f32.
//
// LogSoftmax tile: one 256-thread CTA per row (vocab-sized rows); three passes over the row (max,
// sum of exp, write), each thread on columns c = tid + k * 256 in every pass, so out may alias x.
// RouterTopK tile: one warp per row (E <= 1024 experts, lane owns experts e = lane + 32 * i);
// k rounds of a warp arg-max (lane 0 stores each winner and its logit), then the softmax over the
// stored logits, lanes strided over the k selections.
#include <algorithm>
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/softmax.h"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

__global__ void __launch_bounds__(kThreads) LogSoftmaxKernel(const RowsView x, const RowsView out) {
  __shared__ float scratch[kWarps];
  const int64_t r = blockIdx.x;
  const float* in = RowPtr<const float>(x, r);
  float* o = RowPtr<float>(out, r);
  float max = -INFINITY;
  for (int64_t c = threadIdx.x; c < x.cols; c += kThreads) max = fmaxf(max, in[c]);
  max = CtaMax<kWarps>(max, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < x.cols; c += kThreads) sum += expf(in[c] - max);
  sum = CtaSum<kWarps>(sum, scratch);
  const float log_z = max + logf(sum);
  for (int64_t c = threadIdx.x; c < x.cols; c += kThreads) o[c] = in[c] - log_z;
}

// ArgMax tile: one 256-thread CTA per row and chunk of columns; each thread scans columns
// c = begin + tid + k * 256 keeping the first maximum it sees, then warps and the CTA reduce
// (value, index) pairs preferring the lower index on ties, so the result is the row's first
// maximum whatever the thread count or chunking.
__device__ __forceinline__ void Better(float& best, int64_t& best_i, float v, int64_t i) {
  if (best_i < 0 || v > best || (v == best && i < best_i)) best = v, best_i = i;
}

// The warp's best (value, index) by Better, on every lane (index -1: no lane saw one).
__device__ __forceinline__ void WarpArgMax(float& best, int64_t& best_i) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, best, offset);
    const int64_t i = __shfl_xor_sync(kFullMask, best_i, offset);
    if (i >= 0) Better(best, best_i, v, i);
  }
}

// One CTA per (row, chunk of kArgMaxChunk columns) -- a single vocab-sized row over one SM
// would take ~100 us -- writing its chunk's (value, index), or the row's id when the row is one
// chunk; ArgMaxMergeKernel then reduces a row's chunks.
__global__ void __launch_bounds__(kThreads)
    ArgMaxKernel(const RowsView x, int32_t* ids, ArgMaxPartial* partials) {
  __shared__ float s_best[kWarps];
  __shared__ int64_t s_index[kWarps];
  const int64_t r = blockIdx.x;
  const float* in = RowPtr<const float>(x, r);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kArgMaxChunk;
  const int64_t end = min(x.cols, begin + kArgMaxChunk);
  float best = 0.0f;
  int64_t best_i = -1;  // -1: nothing (NaN only) seen yet
  for (int64_t c = begin + threadIdx.x; c < end; c += kThreads) {
    const float v = in[c];
    if (!isnan(v)) Better(best, best_i, v, c);
  }
  WarpArgMax(best, best_i);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) s_best[warp] = best, s_index[warp] = best_i;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (s_index[w] >= 0) Better(best, best_i, s_best[w], s_index[w]);
    }
    if (gridDim.y == 1) {
      ids[r] = static_cast<int32_t>(best_i < 0 ? 0 : best_i);
    } else {
      partials[r * gridDim.y + blockIdx.y] = {best, static_cast<int32_t>(best_i)};
    }
  }
}

// One warp per row over its chunks' partials (lanes strided, then a butterfly); the tie rule
// (lower index) makes the result the row's first maximum whatever the order of combination.
__global__ void __launch_bounds__(kThreads)
    ArgMaxMergeKernel(const ArgMaxPartial* partials, int64_t rows, int chunks, int32_t* ids) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  if (r >= rows) return;  // whole warps
  const int lane = threadIdx.x % kWarpSize;
  float best = 0.0f;
  int64_t best_i = -1;
  for (int c = lane; c < chunks; c += kWarpSize) {
    const ArgMaxPartial p = partials[r * chunks + c];
    if (p.index >= 0) Better(best, best_i, p.value, p.index);
  }
  WarpArgMax(best, best_i);
  if (lane == 0) ids[r] = static_cast<int32_t>(best_i < 0 ? 0 : best_i);
}

constexpr int kRouterWarpsPerCta = 4;
constexpr int kMaxExpertsPerLane = kMaxRouterExperts / kWarpSize;

__global__ void __launch_bounds__(kRouterWarpsPerCta * kWarpSize)
    RouterTopKKernel(const RowsView logits, int k, int32_t* ids, float* weights) {
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRouterWarpsPerCta +
                      threadIdx.x / kWarpSize;
  if (row >= logits.rows) return;  // whole warps leave; no CTA barrier below
  const int lane = threadIdx.x % kWarpSize;
  const int experts = static_cast<int>(logits.cols);
  const float* l = RowPtr<const float>(logits, row);
  float vals[kMaxExpertsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarpSize;
    vals[i] = e < experts ? l[e] : -INFINITY;
  }
  uint32_t taken = 0;  // bit i: expert lane + 32 * i already selected
  int32_t* row_ids = ids + row * k;
  float* row_weights = weights + row * k;
  float top = 0.0f;  // the largest logit (round 0's winner)
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_id = INT_MAX;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + i * kWarpSize;
      const bool better = vals[i] > best || (vals[i] == best && e < best_id);
      if (e < experts && !(taken >> i & 1u) && better) best = vals[i], best_id = e;
    }
    // Warp arg-max; ties go to the lower id, so every lane agrees on the winner.
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(kFullMask, best, offset);
      const int other_id = __shfl_xor_sync(kFullMask, best_id, offset);
      if (other > best || (other == best && other_id < best_id)) best = other, best_id = other_id;
    }
    if (best_id % kWarpSize == lane) taken |= 1u << (best_id / kWarpSize);
    if (j == 0) top = best;
    if (lane == 0) row_ids[j] = best_id, row_weights[j] = best;  // logit for now
  }
  __syncwarp();  // lane 0's logits visible to the whole warp
  // Softmax over the k selected logits.
  float sum = 0.0f;
  for (int j = lane; j < k; j += kWarpSize) sum += expf(row_weights[j] - top);
  sum = WarpSum(sum);
  __syncwarp();  // every lane has read the logits before any is overwritten
  for (int j = lane; j < k; j += kWarpSize) row_weights[j] = expf(row_weights[j] - top) / sum;
}

}  // namespace

cudaError_t LaunchLogSoftmax(const RowsView& x, const RowsView& out, cudaStream_t stream) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  LogSoftmaxKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(x, out);
  return cudaGetLastError();
}

int64_t ArgMaxScratchBytes(int64_t rows, int64_t cols) {
  const int64_t chunks = (cols + kArgMaxChunk - 1) / kArgMaxChunk;
  return chunks > 1 ? rows * chunks * static_cast<int64_t>(sizeof(ArgMaxPartial)) : 0;
}

cudaError_t LaunchArgMax(const RowsView& x, int32_t* ids, void* scratch, cudaStream_t stream) {
  if (x.rows == 0) return cudaSuccess;
  const int64_t chunks = std::max<int64_t>(1, (x.cols + kArgMaxChunk - 1) / kArgMaxChunk);
  if (chunks > 65535 || x.rows > INT32_MAX) return cudaErrorInvalidValue;
  auto* partials = static_cast<ArgMaxPartial*>(scratch);
  if (chunks > 1 && partials == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(x.rows), static_cast<unsigned>(chunks));
  ArgMaxKernel<<<grid, kThreads, 0, stream>>>(x, ids, partials);
  if (chunks > 1) {
    const auto blocks = static_cast<unsigned>((x.rows + kWarps - 1) / kWarps);
    ArgMaxMergeKernel<<<blocks, kThreads, 0, stream>>>(partials, x.rows,
                                                       static_cast<int>(chunks), ids);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRouterTopK(const RowsView& logits, int k, int32_t* ids, float* weights,
                             cudaStream_t stream, bool pdl) {
  if (logits.rows == 0) return cudaSuccess;
  const auto blocks =
      static_cast<unsigned>((logits.rows + kRouterWarpsPerCta - 1) / kRouterWarpsPerCta);
  return LaunchMaybePdl(RouterTopKKernel, dim3(blocks), dim3(kRouterWarpsPerCta * kWarpSize), 0,
                        stream, pdl, logits, k, ids, weights);
}

}  // namespace xserv::kernels::cuda
