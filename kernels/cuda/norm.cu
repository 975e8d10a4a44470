// RMSNorm (optionally fused with the residual add) and LayerNorm over bf16 rows.
//
// Tile: long rows of whole 16-byte vectors take RmsNormVecKernel (below). Otherwise one row per
// kWarpsPerRow warps. Short rows (cols <= 512: QK-norm over head_dim, tiny
// models) take one warp each, 8 rows per 256-thread CTA; long rows (hidden sizes) take a whole
// 256-thread CTA. Each thread owns the columns c = lane_in_row + k * threads_per_row, in both
// passes, which is what makes out aliasing x or residual safe: a thread only rewrites elements it
// has already read itself (with a residual_out the sum goes there and residual is only read).
// Statistics are fp32 sums combined in a fixed order (deterministic).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_combine.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rms_norm_vec.cuh"
#include "kernels/cuda/fp8_codes.cuh"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kShortRowCols = 512;
static_assert(kThreads == kRmsNormVecThreads, "the GEMV's norm prologue repeats this split");

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
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  constexpr int kThreadsPerRow = kWarpsPerRow * kWarpSize;
  __shared__ float scratch[kThreads / kWarpSize];
  const RowSlot slot = SlotOf<kWarpsPerRow>();
  // kWarpsPerRow == 1 has no CTA barrier, so idle warps may leave; a whole-CTA row is never idle.
  if (slot.row >= a.x.rows) return;
  const int64_t cols = a.x.cols;
  const bf16* x = RowPtr<const bf16>(a.x, slot.row);
  const bf16* res =
      a.residual.data != nullptr ? RowPtr<const bf16>(a.residual, slot.row) : nullptr;
  bf16* res_out = a.residual_out.data != nullptr ? RowPtr<bf16>(a.residual_out, slot.row)
                                                 : const_cast<bf16*>(res);
  bf16* out = RowPtr<bf16>(a.out, slot.row);
  const bf16* w = static_cast<const bf16*>(a.weight);

  float sum_sq = 0.0f;
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    float v = ToFloat(x[c]);
    if (res != nullptr) {
      const bf16 stored = FromFloat<bf16>(v + ToFloat(res[c]));
      res_out[c] = stored;
      v = ToFloat(stored);  // normalise exactly what the residual stream now holds
    }
    sum_sq += v * v;
  }
  sum_sq = CtaSum<kWarpsPerRow>(sum_sq, scratch);
  const float inv = RmsInv(sum_sq, cols, a.eps);
  for (int64_t c = slot.lane_in_row; c < cols; c += kThreadsPerRow) {
    const float v = ToFloat(res != nullptr ? res_out[c] : x[c]);
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

// Long rows with 16-byte aligned, whole 8-element vectors (hidden sizes): one 256-thread CTA per
// row, each thread holding its kVecs vectors in registers between the two passes (one load of
// x and residual, one of the weight), so a decode step's single row is not a chain of dependent
// round trips to memory. With a combine (NormArgs::combine) a vector of x is the MoE combine of
// its columns, rounded to bf16 as LaunchMoeCombine would have stored it.
constexpr int kVecElems = 8;

// NormArgs::fp8_codes: a 128-column group is 16 consecutive vectors, so the 16 lanes of a half
// warp hold it (kThreads is a multiple of 16); its amax is their max (exact in any order), then
// each lane writes its 8 codes and the group's first lane the scale, as fp8_quant.cu computes
// them from the stored bf16 values.
__device__ __forceinline__ void QuantizeNormedVector(const NormArgs& a, int64_t row, int c,
                                                     const uint4& normed) {
  float v[8];
  UnpackBf16x8(normed, v);
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  const unsigned half = 0xffffu << ((threadIdx.x % kWarpSize) & 16);
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(half, amax, offset));
  }
  const float scale = Fp8ScaleOf(amax);
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) packed[e / 4] |= uint32_t{Fp8CodeOf(v[e], scale)} << (8 * (e % 4));
  *reinterpret_cast<uint2*>(a.fp8_codes + row * a.x.cols + int64_t{c} * 8) =
      make_uint2(packed[0], packed[1]);
  if (c % 16 == 0) a.fp8_scales[(c / 16) * a.fp8_scale_stride + row] = scale;
}

template <int kVecs, bool kCombine, bool kQuant = false>
__global__ void __launch_bounds__(kThreads) RmsNormVecKernel(const __grid_constant__ NormArgs a) {
  static_assert(!(kCombine && kQuant), "no W8A8 quantisation with a combine");
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t row = blockIdx.x;
  const int vecs = static_cast<int>(a.x.cols / kVecElems);
  // The weight first: a constant, so its load overlaps the previous kernel (PDL) instead of
  // following the reduction as a dependent round trip to memory. Not where it would spill (the
  // combine form of rows above 2 vectors a thread): there it loads after the reduction.
  constexpr bool kWeightFirst = !kCombine || kVecs <= 2;
  const uint4* w = static_cast<const uint4*>(a.weight);
  uint4 wv[kVecs];
  if constexpr (kWeightFirst) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = threadIdx.x + i * kThreads;
      wv[i] = c < vecs ? w[c] : make_uint4(0, 0, 0, 0);
    }
  }
  PdlBegin();  // pdl.cuh: the previous kernel's outputs are ready from here
  const uint4* x = reinterpret_cast<const uint4*>(RowPtr<const bf16>(a.x, row));
  const bool combine_bad = kCombine && CombineHasBadId(a.combine, row);
  const uint4* res = a.residual.data != nullptr
                         ? reinterpret_cast<const uint4*>(RowPtr<const bf16>(a.residual, row))
                         : nullptr;
  uint4* res_out = a.residual_out.data != nullptr
                       ? reinterpret_cast<uint4*>(RowPtr<bf16>(a.residual_out, row))
                       : const_cast<uint4*>(res);
  uint4* out = reinterpret_cast<uint4*>(RowPtr<bf16>(a.out, row));
  float v[kVecs][kVecElems];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (c >= vecs) continue;
    uint4 xv;
    if constexpr (kCombine) {
      const float4 lo = CombineFloat4(a.combine, row, a.x.cols, int64_t{c} * kVecElems);
      const float4 hi = CombineFloat4(a.combine, row, a.x.cols, int64_t{c} * kVecElems + 4);
      const float sum[kVecElems] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      xv = combine_bad ? NaNBf16x8() : PackBf16x8(sum);
    } else {
      xv = x[c];
    }
    if (res != nullptr) {
      // Normalise exactly what the residual stream now holds.
      res_out[c] = AddResidualBf16x8(xv, res[c], v[i]);
    } else {
      UnpackBf16x8(xv, v[i]);
    }
    sum_sq = AddSquares8(v[i], sum_sq);
  }
  sum_sq = CtaSum<kThreads / kWarpSize>(sum_sq, scratch);
  const float inv = RmsInv(sum_sq, a.x.cols, a.eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (c >= vecs) continue;
    const uint4 normed = RmsScaleBf16x8(kWeightFirst ? wv[i] : w[c], v[i], inv);
    out[c] = normed;
    if constexpr (kQuant) QuantizeNormedVector(a, row, c, normed);
  }
}


// Vectors per thread for the register-resident kernel, or 0 when the row does not qualify.
int VecsPerThread(const NormArgs& a) {
  const int64_t cols = a.x.cols;
  if (!RmsNormTakesVectors(cols)) return 0;
  for (const RowsView* v : {&a.x, &a.residual, &a.residual_out, &a.out}) {
    if (v->data != nullptr && (!Aligned16(v->data) || v->stride % kVecElems != 0)) return 0;
  }
  if (!Aligned16(a.weight)) return 0;
  const int64_t vecs = cols / kVecElems;
  for (int k : {1, 2, 4, 8}) {
    if (vecs <= static_cast<int64_t>(k) * kThreads) return k;
  }
  return 0;
}

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool RmsNormTakesVectors(int64_t cols) {
  return cols > kShortRowCols && cols % kVecElems == 0 && cols <= 8LL * kThreads * kVecElems;
}

bool RmsNormTakesFp8Codes(const NormArgs& args) {
  return args.combine.y == nullptr && args.x.cols % 128 == 0 && VecsPerThread(args) > 0;
}

bool RmsNormTakesCombine(const NormArgs& args) {
  return args.residual.data != nullptr && VecsPerThread(args) > 0;
}

cudaError_t LaunchRmsNorm(const NormArgs& args, cudaStream_t stream) {
  if (args.x.rows == 0) return cudaSuccess;
  if (args.combine.y != nullptr && !RmsNormTakesCombine(args)) return cudaErrorInvalidValue;
  const unsigned rows = static_cast<unsigned>(args.x.rows);
  const auto vec = [&](auto kernel) {
    return LaunchMaybePdl(kernel, rows, kThreads, 0, stream, args.pdl, args);
  };
  const bool combine = args.combine.y != nullptr;
  if (args.fp8_codes != nullptr) {
    if (args.fp8_scales == nullptr || args.fp8_scale_stride < args.x.rows ||
        reinterpret_cast<uintptr_t>(args.fp8_codes) % 8 != 0 ||
        reinterpret_cast<uintptr_t>(args.fp8_scales) % 4 != 0 || !RmsNormTakesFp8Codes(args)) {
      return cudaErrorInvalidValue;
    }
    switch (VecsPerThread(args)) {
      case 1: return vec(RmsNormVecKernel<1, false, true>);
      case 2: return vec(RmsNormVecKernel<2, false, true>);
      case 4: return vec(RmsNormVecKernel<4, false, true>);
      case 8: return vec(RmsNormVecKernel<8, false, true>);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (VecsPerThread(args)) {
    case 1: return combine ? vec(RmsNormVecKernel<1, true>) : vec(RmsNormVecKernel<1, false>);
    case 2: return combine ? vec(RmsNormVecKernel<2, true>) : vec(RmsNormVecKernel<2, false>);
    case 4: return combine ? vec(RmsNormVecKernel<4, true>) : vec(RmsNormVecKernel<4, false>);
    case 8: return combine ? vec(RmsNormVecKernel<8, true>) : vec(RmsNormVecKernel<8, false>);
    default: break;
  }
  if (args.x.cols <= kShortRowCols) {
    const auto ctas = static_cast<unsigned>(Ceil(args.x.rows, kThreads / kWarpSize));
    return LaunchMaybePdl(RmsNormKernel<1>, ctas, kThreads, 0, stream, args.pdl, args);
  }
  return LaunchMaybePdl(RmsNormKernel<kThreads / kWarpSize>, rows, kThreads, 0, stream, args.pdl,
                        args);
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
