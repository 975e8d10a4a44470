// Dynamic per-row FP8 (E4M3) quantisation of bf16 activations in groups of 128 columns, for the
// W8A8 GEMM: scale = amax / 448 (1 for an all-zero group), codes = E4M3(x / scale), round to
// nearest even, saturating. Exactly kernels::QuantizeFp8Rows (the CPU reference).
//
// Tile: one warp per (row, group); lane l holds columns 4l .. 4l + 3 of the group, in one 8-byte
// load where the rows allow it. PDL (pdl.cuh): nothing to load before the wait (x is the previous
// kernel's output), but the launch overlaps the previous kernel's tail.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/pdl.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kGroup = 128;
constexpr int kPerLane = kGroup / kWarpSize;  // 4
constexpr int kWarps = 8;

// kVec: x and ldx allow a lane's 4 values as one 8-byte load.
template <bool kVec>
__global__ void __launch_bounds__(kWarps * kWarpSize)
    QuantizeFp8RowsKernel(const bf16* x, int64_t ldx, int64_t rows, int64_t groups,
                          uint8_t* codes, float* scales, int64_t scale_stride) {
  PdlBegin();  // every CTA waits before it may exit
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  if (item >= rows * groups) return;  // whole warps
  const int lane = threadIdx.x % kWarpSize;
  const int64_t m = item / groups, g = item % groups;
  const bf16* in = x + m * ldx + g * kGroup + lane * kPerLane;
  alignas(8) bf16 raw[kPerLane];
  if constexpr (kVec) {
    *reinterpret_cast<uint2*>(raw) = *reinterpret_cast<const uint2*>(in);
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) raw[i] = in[i];
  }
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    v[i] = __bfloat162float(raw[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = WarpMax(amax);
  const float scale = Fp8ScaleOf(amax);
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) packed |= uint32_t{Fp8CodeOf(v[i], scale)} << (8 * i);
  *reinterpret_cast<uint32_t*>(codes + m * groups * kGroup + g * kGroup + lane * kPerLane) =
      packed;
  if (lane == 0) scales[g * scale_stride + m] = scale;
}

}  // namespace

cudaError_t LaunchQuantizeFp8Rows(const void* x, int64_t ldx, int64_t rows, int64_t cols,
                                  uint8_t* codes, float* scales, cudaStream_t stream, bool pdl) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols % kGroup != 0) return cudaErrorInvalidValue;
  const int64_t groups = cols / kGroup;
  const int64_t warps = rows * groups;
  const auto blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const bool vec = reinterpret_cast<uintptr_t>(x) % 8 == 0 && ldx % kPerLane == 0;
  return LaunchMaybePdl(vec ? QuantizeFp8RowsKernel<true> : QuantizeFp8RowsKernel<false>,
                        dim3(blocks), dim3(kWarps * kWarpSize), 0, stream, pdl,
                        static_cast<const bf16*>(x), ldx, rows, groups, codes, scales,
                        Fp8ActScaleStride(rows));
}

}  // namespace xserv::kernels::cuda
