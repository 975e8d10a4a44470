// Dynamic per-row FP8 (E4M3) quantisation of bf16 activations in groups of 128 columns, for the
// W8A8 GEMM: scale = amax / 448 (1 for an all-zero group), codes = E4M3(x / scale), round to
// nearest even, saturating. Exactly kernels::QuantizeFp8Rows (the CPU reference). The same kernel
// may form its rows as the MLP's silu(gate) * up (LaunchSiluMulQuantizeFp8Rows): one kernel
// instead of SiluMul and then the quantiser ahead of the down projection.
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

// The rows the kernel quantises: x itself, or (kSilu) silu(gate) * up rounded to bf16 exactly as
// LaunchSiluMul stores it, which the kernel also stores to act.
struct QuantSource {
  const bf16* x;  // or the gate
  int64_t ldx;
  const bf16* up = nullptr;  // kSilu
  int64_t ld_up = 0;
  bf16* act = nullptr;  // kSilu
  int64_t ld_act = 0;
};

// A lane's 4 values at `p`, as one 8-byte load when kVec.
template <bool kVec>
__device__ __forceinline__ void LoadFour(const bf16* p, bf16 (&raw)[kPerLane]) {
  if constexpr (kVec) {
    *reinterpret_cast<uint2*>(raw) = *reinterpret_cast<const uint2*>(p);
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) raw[i] = p[i];
  }
}

// kVec: every row pointer and stride allow a lane's 4 values as one 8-byte access.
template <bool kVec, bool kSilu>
__global__ void __launch_bounds__(kWarps * kWarpSize)
    QuantizeFp8RowsKernel(const QuantSource src, int64_t rows, int64_t groups, uint8_t* codes,
                          float* scales, int64_t scale_stride) {
  PdlBegin();  // every CTA waits before it may exit
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  if (item >= rows * groups) return;  // whole warps
  const int lane = threadIdx.x % kWarpSize;
  const int64_t m = item / groups, g = item % groups;
  const int64_t col = g * kGroup + lane * kPerLane;
  alignas(8) bf16 raw[kPerLane];
  LoadFour<kVec>(src.x + m * src.ldx + col, raw);
  if constexpr (kSilu) {
    alignas(8) bf16 up[kPerLane];
    LoadFour<kVec>(src.up + m * src.ld_up + col, up);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      raw[i] = __float2bfloat16_rn(
          SiluMulOp{}(__bfloat162float(raw[i]), __bfloat162float(up[i])));
    }
    bf16* act = src.act + m * src.ld_act + col;
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(act) = *reinterpret_cast<const uint2*>(raw);
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) act[i] = raw[i];
    }
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
  *reinterpret_cast<uint32_t*>(codes + m * groups * kGroup + col) = packed;
  if (lane == 0) scales[g * scale_stride + m] = scale;
}

template <bool kSilu>
cudaError_t LaunchQuantize(const QuantSource& src, int64_t rows, int64_t cols, uint8_t* codes,
                           float* scales, cudaStream_t stream, bool pdl) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols % kGroup != 0) return cudaErrorInvalidValue;
  const int64_t groups = cols / kGroup;
  const int64_t warps = rows * groups;
  const auto blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const auto vec_rows = [](const void* p, int64_t ld) {
    return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 8 == 0 && ld % kPerLane == 0);
  };
  const bool vec = vec_rows(src.x, src.ldx) && vec_rows(src.up, src.ld_up) &&
                   vec_rows(src.act, src.ld_act);
  return LaunchMaybePdl(vec ? QuantizeFp8RowsKernel<true, kSilu>
                            : QuantizeFp8RowsKernel<false, kSilu>,
                        dim3(blocks), dim3(kWarps * kWarpSize), 0, stream, pdl, src, rows, groups,
                        codes, scales, Fp8ActScaleStride(rows));
}

}  // namespace

cudaError_t LaunchQuantizeFp8Rows(const void* x, int64_t ldx, int64_t rows, int64_t cols,
                                  uint8_t* codes, float* scales, cudaStream_t stream, bool pdl) {
  return LaunchQuantize<false>(QuantSource{.x = static_cast<const bf16*>(x), .ldx = ldx}, rows,
                               cols, codes, scales, stream, pdl);
}

cudaError_t LaunchSiluMulQuantizeFp8Rows(const SiluMulRows& in, int64_t rows, int64_t cols,
                                         uint8_t* codes, float* scales, cudaStream_t stream,
                                         bool pdl) {
  return LaunchQuantize<true>(QuantSource{.x = static_cast<const bf16*>(in.gate),
                                          .ldx = in.ld_gate,
                                          .up = static_cast<const bf16*>(in.up),
                                          .ld_up = in.ld_up,
                                          .act = static_cast<bf16*>(in.act),
                                          .ld_act = in.ld_act},
                              rows, cols, codes, scales, stream, pdl);
}

}  // namespace xserv::kernels::cuda
