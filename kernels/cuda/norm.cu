// RMSNorm (optionally fused with the residual add) and LayerNorm over bf16 rows.
//
// Tile: one row per kWarpsPerRow warps. Short rows (cols <= 512: QK-norm over head_dim, tiny
// models) take one warp each, 8 rows per 256-thread CTA; long rows (hidden sizes) take a whole
// 256-thread CTA. Each thread owns the columns c = lane_in_row + k * threads_per_row, in both
// passes, which is what makes out aliasing x or residual safe: a thread only rewrites elements it
// has already read itself. Statistics are fp32 sums combined in a fixed order (deterministic).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kShortRowCols = 512;

struct RowSlot {
  int64_t row;      // row this thread works on (>= rows: idle)
  int lane_in_row;  // 0 .. threads_per_row - 1
};

template <int kWarpsPerRow>
__device__ __forceinline__ RowSlot SlotOf() {
  constexpr int kThreadsPerRow = kWarpsPerRow * kWarpSize;
  constexpr int kRowsPerCta = kThreads / kThreadsPerRow;
  return RowSlot{static_cast<int64_t>(blockIdx.x) * kRowsPerCta + threadIdx.x / kThreadsPerRow,
                 static_cast<int>(threadIdx.x % kThreadsPerRow)};
}

template <int kWarpsPerRow>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const __grid_constant__ NormArgs a) {
  constexpr int kThreadsPerRow = kWarpsPerRow * kWarpSize;
  __shared__ float scratch[kThreads / kWarpSize];
  const RowSlot slot = SlotOf<kWarpsPerRow>();
  // kWarpsPerRow == 1 has no CTA barrier, so idle warps may leave; a whole-CTA row is never idle.
  if (slot.row >= a.x.rows) return;
  const int64_t cols = a.x.cols;
  const bf16* x = RowPtr<const bf16>(a.x, slot.row);
  bf16* res = a.residual.data != nullptr ? RowPtr<bf16>(a.residual, slot.row) : nullptr;
  bf16* out = RowPtr<bf16>(a.out, slot.row);
  const bf16* w = static_cast<const bf16*>(a.weight);

  float sum_sq = 0.0f;
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    float v = ToFloat(x[c]);
    if (res != nullptr) {
      const bf16 stored = FromFloat<bf16>(v + ToFloat(res[c]));
      res[c] = stored;
      v = ToFloat(stored);  // normalise exactly what the residual stream now holds
    }
    sum_sq += v * v;
  }
  sum_sq = CtaSum<kWarpsPerRow>(sum_sq, scratch);
  const float inv = rsqrtf(sum_sq / static_cast<float>(cols) + a.eps);
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    const float v = ToFloat(res != nullptr ? res[c] : x[c]);
    out[c] = FromFloat<bf16>(ToFloat(w[c]) * (v * inv));
  }
}

template <int kWarpsPerRow>
__global__ void __launch_bounds__(kThreads) LayerNormKernel(const __grid_constant__ NormArgs a) {
  constexpr int kThreadsPerRow = kWarpsPerRow * kWarpSize;
  __shared__ float scratch[kThreads / kWarpSize];
  const RowSlot slot = SlotOf<kWarpsPerRow>();
  if (slot.row >= a.x.rows) return;  // see RmsNormKernel
  const int64_t cols = a.x.cols;
  const bf16* x = RowPtr<const bf16>(a.x, slot.row);
  bf16* out = RowPtr<bf16>(a.out, slot.row);
  const bf16* w = static_cast<const bf16*>(a.weight);
  const bf16* b = static_cast<const bf16*>(a.bias);

  // Two-pass mean / variance: no cancellation for rows with a large mean.
  float sum = 0.0f;
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) sum += ToFloat(x[c]);
  const float mean = CtaSum<kWarpsPerRow>(sum, scratch) / static_cast<float>(cols);
  float var = 0.0f;
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    const float d = ToFloat(x[c]) - mean;
    var += d * d;
  }
  var = CtaSum<kWarpsPerRow>(var, scratch) / static_cast<float>(cols);
  const float inv = rsqrtf(var + a.eps);
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    out[c] = FromFloat<bf16>((ToFloat(x[c]) - mean) * inv * ToFloat(w[c]) + ToFloat(b[c]));
  }
}

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

cudaError_t LaunchRmsNorm(const NormArgs& args, cudaStream_t stream) {
  if (args.x.rows == 0) return cudaSuccess;
  if (args.x.cols <= kShortRowCols) {
    RmsNormKernel<1><<<Ceil(args.x.rows, kThreads / kWarpSize), kThreads, 0, stream>>>(args);
  } else {
    RmsNormKernel<kThreads / kWarpSize><<<args.x.rows, kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

cudaError_t LaunchLayerNorm(const NormArgs& args, cudaStream_t stream) {
  if (args.x.rows == 0) return cudaSuccess;
  if (args.x.cols <= kShortRowCols) {
    LayerNormKernel<1><<<Ceil(args.x.rows, kThreads / kWarpSize), kThreads, 0, stream>>>(args);
  } else {
    LayerNormKernel<kThreads / kWarpSize><<<args.x.rows, kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
