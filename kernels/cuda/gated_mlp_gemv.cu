// A gated MLP at one row in one kernel (gated_mlp_gemv.h). Each CTA takes units of kSlice
// intermediate columns in a grid-stride loop over a grid that is resident at once:
//   A. its 8 warps compute the unit's gate and up values (warp w: pairs w, w + 8, ...), each pair
//      exactly as the FP8 GEMV's two-column tile computes two outputs (gemv.cu: lane i reads
//      16-byte chunks i, i + 32, ..., each chunk's partial scaled by its block scale, then a
//      butterfly), so they round to the gate_up GEMV's bf16 bits, and the activation to SiluMul's;
//   B. the CTA multiplies the unit's activations by the matching kSlice columns of down (kSlice
//      bytes of every row: kSlice / 16 threads per row) and adds each row's partial into the f32
//      accumulator (red.global.add).
// The last CTA to arrive (a counter, after a fence) converts the accumulator to bf16 and zeroes
// it. Summing over units in f32 by atomics, the result depends on the order the CTAs add in: not
// bit-reproducible (the chain's down GEMV is), within a bf16 rounding of it.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/gated_mlp_gemv.h"
#include "kernels/cuda/gemv_norm_prologue.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rms_norm_vec.cuh"

namespace xserv::kernels::cuda {
namespace {

constexpr int kThreads = kRmsNormVecThreads;  // the norm prologue's CTA
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kUnroll = 4;       // phase A: loads of each row in flight per lane (the GEMV's 2x4)
constexpr int kDownUnroll = 8;   // phase B: loads in flight per thread (down transposed)
// Down as in the checkpoint: fewer, as each thread also holds its 16 activations.
constexpr int kColumnsUnroll = 4;
constexpr int kCodes = 16;       // E4M3 codes per 16-byte load
// Three CTAs per SM (at most 80 registers), as the FP8 GEMV: Qwen3-8B's 384 units of 32 columns
// then fit one wave of 396.
constexpr int kCtasPerSm = 3;

__device__ __forceinline__ void Unpack16(const uint4& raw, float* out) {
  const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = Fp8Pair(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float RoundBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ void RedAdd4(float* p, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a),
               "f"(b), "f"(c), "f"(d)
               : "memory");
#else
  atomicAdd(p, a), atomicAdd(p + 1, b), atomicAdd(p + 2, c), atomicAdd(p + 3, d);
#endif
}

// Phase B, down as [hidden, inter]: thread t takes codes 16 (t % kT) .. of the unit's columns in
// rows t / kT, t / kT + kRows, ...
template <int kSlice>
__device__ __forceinline__ void DownColumns(const GatedMlpGemvArgs& a, int i0,
                                            const float* s_act, float* accum) {
  constexpr int kT = kSlice / kCodes;  // threads per row
  constexpr int kRows = kThreads / kT;  // rows per pass
  const int h = threadIdx.x % kT, first_row = threadIdx.x / kT;
  float act[kCodes];
#pragma unroll
  for (int e = 0; e < kCodes; ++e) act[e] = s_act[h * kCodes + e];
  const uint8_t* base = a.down + i0 + h * kCodes;
  const float* scale_col = a.down_scales + i0 / a.block;
  const int scale_cols = a.inter / a.block;
  for (int r0 = 0; r0 < a.hidden; r0 += kRows * kColumnsUnroll) {
    uint4 w[kColumnsUnroll];
#pragma unroll
    for (int u = 0; u < kColumnsUnroll; ++u) {
      const int row = r0 + u * kRows + first_row;
      w[u] = row < a.hidden
                 ? __ldcs(reinterpret_cast<const uint4*>(base + static_cast<int64_t>(row) * a.inter))
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kColumnsUnroll; ++u) {
      const int row = r0 + u * kRows + first_row;
      float wf[kCodes];
      Unpack16(w[u], wf);
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < kCodes; ++e) part = fmaf(wf[e], act[e], part);
#pragma unroll
      for (int o = 1; o < kT; o <<= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      if (h == 0 && row < a.hidden) {
        atomicAdd(accum + row, part * __ldg(scale_col + (row / a.block) * scale_cols));
      }
    }
  }
}

// Phase B, down as [inter, hidden] (down_transposed): thread t takes output columns 16 t, ...
// s_part non-null: the partial outputs go there (added), for the cluster's reduction.
template <int kSlice>
__device__ __forceinline__ void DownRows(const GatedMlpGemvArgs& a, int i0, const float* s_act,
                                         float* accum, float* s_part) {
  const int groups = a.hidden / kCodes;
  const int scale_cols = a.hidden / a.block;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    const uint8_t* base = a.down + static_cast<int64_t>(i0) * a.hidden + g * kCodes;
    float acc[kCodes] = {};
    for (int j0 = 0; j0 < kSlice; j0 += kDownUnroll) {
      uint4 w[kDownUnroll];
#pragma unroll
      for (int u = 0; u < kDownUnroll; ++u) {
        w[u] = __ldcs(reinterpret_cast<const uint4*>(base + static_cast<int64_t>(j0 + u) *
                                                               a.hidden));
      }
#pragma unroll
      for (int u = 0; u < kDownUnroll; ++u) {
        float wf[kCodes];
        Unpack16(w[u], wf);
        const float act = s_act[j0 + u];
#pragma unroll
        for (int e = 0; e < kCodes; ++e) acc[e] = fmaf(wf[e], act, acc[e]);
      }
    }
    const float scale = __ldg(a.down_scales + (i0 / a.block) * scale_cols + g * kCodes / a.block);
    if (s_part != nullptr) {
#pragma unroll
      for (int e = 0; e < kCodes; ++e) s_part[g * kCodes + e] += acc[e] * scale;
      continue;
    }
    float* out = accum + g * kCodes;
    if (a.bench_no_adds) {  // timing only: the sums kept live, never stored
      if (acc[0] != acc[0]) out[0] = acc[0];
      continue;
    }
#pragma unroll
    for (int q = 0; q < kCodes; q += 4) {
      RedAdd4(out + q, acc[q] * scale, acc[q + 1] * scale, acc[q + 2] * scale,
              acc[q + 3] * scale);
    }
  }
}

template <int kSlice, bool kNorm, bool kTransposed>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) GatedMlpGemvKernel(const __grid_constant__
                                                               GatedMlpGemvArgs a) {
  static_assert(kSlice % kWarps == 0 && kSlice % kCodes == 0 && kSlice % kDownUnroll == 0,
                "a unit: whole pairs per warp, whole loads per down row");
  extern __shared__ uint4 s_x[];  // x [hidden / 8] bf16 chunks (kNorm: + the weight's)
  __shared__ __align__(16) float s_act[kSlice];
  __shared__ bool s_last;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int chunks = a.hidden / kCodes;  // 16-byte loads per gate or up row
  const int units = a.inter / kSlice;
  const auto row_bytes = static_cast<int64_t>(a.hidden);

  uint4 wv[kUnroll][2];
  // Chunks c0, c0 + 32, ... of the gate and up rows of intermediate column j.
  const auto load_batch = [&](int j, int c0) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const uint4* w = reinterpret_cast<const uint4*>(a.gate_up + (j + g * a.inter) * row_bytes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        wv[u][g] = c < chunks ? __ldcs(w + c) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  if (static_cast<int>(blockIdx.x) < units) load_batch(blockIdx.x * kSlice + warp, lane);
  const int x_chunks = a.hidden / 8;
  uint4* s_w = s_x + x_chunks;
  float* s_part = reinterpret_cast<float*>(s_x + (kNorm ? 2 : 1) * x_chunks);  // a.cluster > 1
  if (kTransposed && a.cluster > 1) {
    for (int i = threadIdx.x; i < a.hidden; i += kThreads) s_part[i] = 0.0f;
  }
  if constexpr (kNorm) {  // a constant
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
      CpAsync16(s_w + c, static_cast<const uint4*>(a.norm.weight) + c, 16);
    }
    CpAsyncCommit();
  }
  PdlBegin();  // x (and the norm's residual) belong to the stream's earlier kernels
  if constexpr (kNorm) {
    StageNormedX<1>(a.norm, a.x, a.hidden, a.hidden, s_w, s_x);
  } else {
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) s_x[c] = static_cast<const uint4*>(a.x)[c];
  }
  __syncthreads();

  bool loaded = true;
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int i0 = unit * kSlice;
    for (int pair = warp; pair < kSlice; pair += kWarps) {
      const int j = i0 + pair;
      const float* scale_row[2] = {a.gate_up_scales + (j / a.block) * (a.hidden / a.block),
                                   a.gate_up_scales +
                                       ((j + a.inter) / a.block) * (a.hidden / a.block)};
      float acc[2] = {};
      for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnroll) {
        if (!loaded) load_batch(j, c0);
        loaded = false;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * kWarpSize;
          if (c >= chunks) break;
          float xf[kCodes];
          UnpackBf16x8(s_x[2 * c], xf);
          UnpackBf16x8(s_x[2 * c + 1], xf + 8);
#pragma unroll
          for (int g = 0; g < 2; ++g) {
            const float scale = __ldg(scale_row[g] + c * kCodes / a.block);
            float wf[kCodes];
            Unpack16(wv[u][g], wf);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < kCodes; ++i) part = fmaf(wf[i], xf[i], part);
            acc[g] = fmaf(part, scale, acc[g]);
          }
        }
      }
      acc[0] = WarpSum(acc[0]);
      acc[1] = WarpSum(acc[1]);
      // The gate_up GEMV's bf16 outputs, then SiluMul's op and rounding.
      if (lane == 0) s_act[pair] = RoundBf16(SiluMulOp{}(RoundBf16(acc[0]), RoundBf16(acc[1])));
    }
    __syncthreads();
    float* accum = a.accum + (blockIdx.x % a.accum_copies) * a.hidden;  // cluster 1
    if constexpr (kTransposed) {
      DownRows<kSlice>(a, i0, s_act, accum, a.cluster > 1 ? s_part : nullptr);
    } else {
      DownColumns<kSlice>(a, i0, s_act, accum);
    }
    __syncthreads();  // s_act is the next unit's
  }

  if (kTransposed && a.cluster > 1) {
    // The cluster's CTAs sum their partials through distributed shared memory, each CTA a
    // share of the outputs, so each output gets one add per cluster instead of one per CTA.
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    const int ranks = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int quads = a.hidden / 4;
    float* accum = a.accum + (blockIdx.x / ranks % a.accum_copies) * a.hidden;
    for (int c = rank * quads / ranks + threadIdx.x; c < (rank + 1) * quads / ranks;
         c += kThreads) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int q = 0; q < ranks; ++q) {  // in rank order
        const float4 v = reinterpret_cast<const float4*>(cluster.map_shared_rank(s_part, q))[c];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      if (!a.bench_no_adds) RedAdd4(accum + 4 * c, sum.x, sum.y, sum.z, sum.w);
    }
    cluster.sync();  // no CTA leaves while another reads its shared memory
  }

  // The last CTA to arrive sums up: every CTA's adds are ordered before its arrival (fence,
  // barrier, then thread 0's count), and the last one reads after its own fence.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(a.arrivals, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  auto* out = static_cast<__nv_bfloat162*>(a.out);
  for (int c = threadIdx.x; c < a.hidden / 4; c += kThreads) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < a.accum_copies; ++k) {  // in copy order
      float4* p = reinterpret_cast<float4*>(a.accum + k * a.hidden) + c;
      const float4 v = __ldcg(p);
      sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      __stcg(p, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    }
    out[2 * c] = __floats2bfloat162_rn(sum.x, sum.y);
    out[2 * c + 1] = __floats2bfloat162_rn(sum.z, sum.w);
  }
  if (threadIdx.x == 0) *a.arrivals = 0;
}

template <int kSlice, bool kNorm, bool kTransposed>
cudaError_t LaunchWith(const GatedMlpGemvArgs& a, cudaStream_t stream) {
  constexpr auto kernel = GatedMlpGemvKernel<kSlice, kNorm, kTransposed>;
  const size_t smem = static_cast<size_t>(kNorm ? 2 : 1) * a.hidden * 2 +
                     (a.cluster > 1 ? static_cast<size_t>(a.hidden) * 4 : 0);
  if (const cudaError_t err = AllowDynamicSharedMemory<kernel>(static_cast<int64_t>(smem));
      err != cudaSuccess) {
    return err;
  }
  int per_sm = 0;
  if (const cudaError_t err = ResidentPerSm<kernel>(kThreads, smem, &per_sm); err != cudaSuccess) {
    return err;
  }
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * SmCount();
  int64_t grid = std::min<int64_t>(a.inter / kSlice, resident);
  grid -= grid % a.cluster;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = static_cast<unsigned>(a.cluster);
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;  // the cluster shape, then PDL if asked for
  config.numAttrs = a.pdl ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, a);
}

template <int kSlice>
cudaError_t LaunchSlice(const GatedMlpGemvArgs& a, cudaStream_t stream) {
  const bool norm = a.norm.weight != nullptr;
  if (a.down_transposed) {
    return norm ? LaunchWith<kSlice, true, true>(a, stream)
                : LaunchWith<kSlice, false, true>(a, stream);
  }
  return norm ? LaunchWith<kSlice, true, false>(a, stream)
              : LaunchWith<kSlice, false, false>(a, stream);
}

int SliceOf(const GatedMlpGemvArgs& a) { return a.slice == 0 ? 32 : a.slice; }

}  // namespace

bool GatedMlpGemvSupports(const GatedMlpGemvArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int slice = SliceOf(a);
  const GemvNorm& n = a.norm;
  const bool norm_ok = n.weight == nullptr ||
                       (RmsNormTakesVectors(a.hidden) && n.normed != nullptr &&
                        (n.residual == nullptr) == (n.residual_out == nullptr) &&
                        aligned(n.weight) && aligned(n.residual) && aligned(n.residual_out) &&
                        aligned(n.normed));
  return (slice == 16 || slice == 32 || slice == 64) && a.block == 128 && a.hidden >= 128 &&
         a.hidden % 128 == 0 && a.inter >= 128 && a.inter % 128 == 0 &&
         int64_t{2} * a.hidden * 2 <= kGemvMaxSharedBytes && norm_ok && aligned(a.x) &&
         aligned(a.gate_up) && aligned(a.down) && aligned(a.out) && aligned(a.accum) &&
         a.gate_up_scales != nullptr && a.down_scales != nullptr && a.arrivals != nullptr &&
         a.accum_copies >= 1 && a.accum_copies <= 64 &&
         (a.cluster == 1 || ((a.cluster == 2 || a.cluster == 4) && a.down_transposed));
}

cudaError_t LaunchGatedMlpGemv(const GatedMlpGemvArgs& a, cudaStream_t stream) {
  if (!GatedMlpGemvSupports(a)) return cudaErrorInvalidValue;
  switch (SliceOf(a)) {
    case 16: return LaunchSlice<16>(a, stream);
    case 32: return LaunchSlice<32>(a, stream);
    case 64: return LaunchSlice<64>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace xserv::kernels::cuda
