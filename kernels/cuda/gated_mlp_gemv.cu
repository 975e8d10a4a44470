// A gated MLP at one row in one kernel (gated_mlp_gemv.h). Each 256-thread CTA takes units of
// kSlice = 32 intermediate columns in a grid-stride loop over a grid that is resident at once (3
// CTAs per SM: Qwen3-8B's 384 units fit one wave of 396):
//   A. its 8 warps compute the unit's gate and up values (warp w: pairs w, w + 8, ...), each pair
//      exactly as the FP8 GEMV's two-column tile computes two outputs (gemv.cu: lane i reads
//      16-byte chunks i, i + 32, ..., each chunk's partial scaled by its block scale, then a
//      butterfly), so they round to the gate_up GEMV's bf16 bits, and the activation to SiluMul's;
//   B. thread t multiplies the unit's 32 activations by columns 16 t .. 16 t + 15 of the unit's 32
//      rows of down transposed and adds the products to its outputs in shared memory.
// CTAs come in clusters of two, which sum their partial outputs through distributed shared
// memory and add each output once per cluster into the f32 accumulator (red.global.add): the
// adds of 384 CTAs to the same 4,096 addresses queued at L2 and cost ~4 µs of a 47 µs MLP; one
// per pair of CTAs cost ~2 (clusters of four measured slower: fewer of them were resident). The
// last CTA to arrive (a counter, after a fence) converts the accumulator to bf16 and zeroes it.
// Summing partials in f32 by atomics, the result depends on the order the clusters add in: not
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
constexpr int kSlice = 32;      // intermediate columns per unit
constexpr int kCluster = 2;     // CTAs per cluster
constexpr int kCtasPerSm = 3;   // at most 80 registers
constexpr int kUnroll = 4;      // phase A: loads of each row in flight per lane (the GEMV's 2x4)
constexpr int kDownBatch = 8;   // phase B: loads in flight per thread
constexpr int kCodes = 16;      // E4M3 codes per 16-byte load
static_assert(kSlice % kWarps == 0 && kSlice % kDownBatch == 0, "whole pairs, whole batches");

__device__ __forceinline__ float RoundBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ void RedAdd4(float* p, const float4& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
#else
  atomicAdd(p, v.x), atomicAdd(p + 1, v.y), atomicAdd(p + 2, v.z), atomicAdd(p + 3, v.w);
#endif
}

// Phase B: s_part[16 g + e] += sum over the unit's rows j of act_j * down_t[i0 + j][16 g + e],
// thread t taking column groups g = t, t + kThreads, ...
__device__ __forceinline__ void AddDownProducts(const GatedMlpGemvArgs& a, int i0,
                                                const float* s_act, float* s_part) {
  const int groups = a.hidden / kCodes;
  const int scale_cols = a.hidden / a.block;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    const uint8_t* base = a.down_t + static_cast<int64_t>(i0) * a.hidden + g * kCodes;
    float acc[kCodes] = {};
    for (int j0 = 0; j0 < kSlice; j0 += kDownBatch) {
      uint4 w[kDownBatch];
#pragma unroll
      for (int u = 0; u < kDownBatch; ++u) {
        w[u] = __ldcs(reinterpret_cast<const uint4*>(base + static_cast<int64_t>(j0 + u) *
                                                               a.hidden));
      }
#pragma unroll
      for (int u = 0; u < kDownBatch; ++u) {
        float wf[kCodes];
        Fp8Unpack16(w[u], wf);
        const float act = s_act[j0 + u];
#pragma unroll
        for (int e = 0; e < kCodes; ++e) acc[e] = fmaf(wf[e], act, acc[e]);
      }
    }
    // One scale for the unit: its 32 rows lie in one 128-block.
    const float scale =
        __ldg(a.down_t_scales + (i0 / a.block) * scale_cols + g * kCodes / a.block);
#pragma unroll
    for (int e = 0; e < kCodes; ++e) s_part[g * kCodes + e] += acc[e] * scale;
  }
}

template <bool kNorm>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    GatedMlpGemvKernel(const __grid_constant__ GatedMlpGemvArgs a) {
  // x [hidden / 8] bf16 chunks, (kNorm) the norm weight's, then the partial output [hidden] f32.
  extern __shared__ uint4 s_x[];
  __shared__ float s_act[kSlice];
  __shared__ bool s_last;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int chunks = a.hidden / kCodes;  // 16-byte loads per gate or up row
  const int units = a.inter / kSlice;
  const auto row_bytes = static_cast<int64_t>(a.hidden);
  const int x_chunks = a.hidden / 8;
  uint4* s_w = s_x + x_chunks;
  float* s_part = reinterpret_cast<float*>(s_x + (kNorm ? 2 : 1) * x_chunks);

  uint4 wv[kUnroll][2];
  // Chunks c0, c0 + 32, ... of the gate and up rows of intermediate column j.
  const auto load_batch = [&](int j, int c0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4* w = reinterpret_cast<const uint4*>(a.gate_up + (j + h * a.inter) * row_bytes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        wv[u][h] = c < chunks ? __ldcs(w + c) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  if (static_cast<int>(blockIdx.x) < units) load_batch(blockIdx.x * kSlice + warp, lane);
  if constexpr (kNorm) {  // a constant
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
      CpAsync16(s_w + c, static_cast<const uint4*>(a.norm.weight) + c, 16);
    }
    CpAsyncCommit();
  }
  for (int i = threadIdx.x; i < a.hidden; i += kThreads) s_part[i] = 0.0f;
  PdlBegin();  // x (and the norm's residual) belong to the stream's earlier kernels
  if constexpr (kNorm) {
    StageNormedX<1>(a.norm, a.x, a.hidden, a.hidden, s_w, s_x);
  } else {
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
      s_x[c] = static_cast<const uint4*>(a.x)[c];
    }
  }
  __syncthreads();

  bool loaded = true;
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int i0 = unit * kSlice;
    const int scale_cols = a.hidden / a.block;
    for (int pair = warp; pair < kSlice; pair += kWarps) {
      const int j = i0 + pair;
      const float* scale_row[2] = {a.gate_up_scales + (j / a.block) * scale_cols,
                                   a.gate_up_scales + ((j + a.inter) / a.block) * scale_cols};
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
          for (int h = 0; h < 2; ++h) {
            const float scale = __ldg(scale_row[h] + c * kCodes / a.block);
            float wf[kCodes];  // Fp8Dot16's order; called as such it spills 16 bytes here
            Fp8Unpack16(wv[u][h], wf);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < kCodes; ++i) part = fmaf(wf[i], xf[i], part);
            acc[h] = fmaf(part, scale, acc[h]);
          }
        }
      }
      acc[0] = WarpSum(acc[0]);
      acc[1] = WarpSum(acc[1]);
      // The gate_up GEMV's bf16 outputs, then SiluMul's op and rounding.
      if (lane == 0) s_act[pair] = RoundBf16(SiluMulOp{}(RoundBf16(acc[0]), RoundBf16(acc[1])));
    }
    __syncthreads();
    AddDownProducts(a, i0, s_act, s_part);
    __syncthreads();  // s_act is the next unit's
  }

  // The cluster's CTAs sum their partials through distributed shared memory, each CTA a share
  // of the outputs in rank order, and add the sums to the accumulator.
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int quads = a.hidden / 4;
  for (int c = rank * quads / kCluster + threadIdx.x; c < (rank + 1) * quads / kCluster;
       c += kThreads) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      const float4 v = reinterpret_cast<const float4*>(cluster.map_shared_rank(s_part, q))[c];
      sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    if (!a.bench_no_adds) RedAdd4(a.accum + 4 * c, sum);
  }
  cluster.sync();  // no CTA leaves while another reads its shared memory

  // The last CTA to arrive sums up: every CTA's adds are ordered before its arrival (fence,
  // barrier, then thread 0's count), and the last one reads after its own fence.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(a.arrivals, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  auto* out = static_cast<__nv_bfloat162*>(a.out);
  for (int c = threadIdx.x; c < quads; c += kThreads) {
    float4* p = reinterpret_cast<float4*>(a.accum) + c;
    const float4 v = __ldcg(p);
    out[2 * c] = __floats2bfloat162_rn(v.x, v.y);
    out[2 * c + 1] = __floats2bfloat162_rn(v.z, v.w);
    __stcg(p, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
  }
  if (threadIdx.x == 0) *a.arrivals = 0;
}

size_t SmemBytes(const GatedMlpGemvArgs& a) {
  return static_cast<size_t>(a.norm.weight != nullptr ? 2 : 1) * a.hidden * 2 +
         static_cast<size_t>(a.hidden) * 4;
}

template <bool kNorm>
cudaError_t LaunchWith(const GatedMlpGemvArgs& a, cudaStream_t stream) {
  constexpr auto kernel = GatedMlpGemvKernel<kNorm>;
  const size_t smem = SmemBytes(a);
  if (const cudaError_t err = AllowDynamicSharedMemory<kernel>(static_cast<int64_t>(smem));
      err != cudaSuccess) {
    return err;
  }
  int per_sm = 0;
  if (const cudaError_t err = ResidentPerSm<kernel>(kThreads, smem, &per_sm); err != cudaSuccess) {
    return err;
  }
  // Every CTA resident at once, whole clusters (units is even: GatedMlpGemvSupports).
  int64_t grid = std::min<int64_t>(a.inter / kSlice, int64_t{std::max(per_sm, 1)} * SmCount());
  grid -= grid % kCluster;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = kCluster;
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

}  // namespace

bool GatedMlpGemvSupports(const GatedMlpGemvArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const GemvNorm& n = a.norm;
  const bool norm_ok = n.weight == nullptr ||
                       (RmsNormTakesVectors(a.hidden) && n.normed != nullptr &&
                        (n.residual == nullptr) == (n.residual_out == nullptr) &&
                        aligned(n.weight) && aligned(n.residual) && aligned(n.residual_out) &&
                        aligned(n.normed));
  const bool shape_ok = a.block == 128 && a.hidden >= 128 && a.hidden % 128 == 0 &&
                        a.inter >= 128 && a.inter % (kSlice * kCluster) == 0 &&
                        a.inter % 128 == 0 && SmemBytes(a) <= 64 * 1024;
  return shape_ok && norm_ok && aligned(a.x) && aligned(a.gate_up) && aligned(a.down_t) &&
         aligned(a.out) && aligned(a.accum) && a.gate_up_scales != nullptr &&
         a.down_t_scales != nullptr && a.arrivals != nullptr;
}

cudaError_t LaunchGatedMlpGemv(const GatedMlpGemvArgs& a, cudaStream_t stream) {
  if (!GatedMlpGemvSupports(a)) return cudaErrorInvalidValue;
  return a.norm.weight != nullptr ? LaunchWith<true>(a, stream) : LaunchWith<false>(a, stream);
}

}  // namespace xserv::kernels::cuda
