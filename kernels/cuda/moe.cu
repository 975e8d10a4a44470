// Sparse MoE over dense bf16 experts: only the k selected experts of each token run.
//
// Tile: one CTA of kWarps warps per token. Shared memory (fp32):
//   x_s   [hidden]  the token's input row
//   act   [inter]   Glu(gate_up_e · x + b) of the current expert
//   acc   [hidden]  sum over the token's selections of w_j * (down_e · act + b)
// Per selection j (in slot order): warps take activation features i = warp, warp + kWarps, ...
// (one warp-reduced dot product each for gate row 2i and up row 2i + 1), barrier, then output
// features c the same way through down_e; feature c always belongs to warp c % kWarps, so acc is
// updated by one lane in a fixed order (deterministic). fp32 throughout; one bf16 rounding on out.
// This is a GEMV per token and expert: correct for any size, fast for none. The grouped-GEMM
// version is the performance issue's job.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.h"

namespace xserv::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;

// Warp dot product of a bf16 row with an fp32 shared vector; every lane gets the sum.
__device__ __forceinline__ float WarpDot(const bf16* row, const float* vec, int n, int lane) {
  float sum = 0.0f;
  for (int i = lane; i < n; i += kWarpSize) sum += ToFloat(row[i]) * vec[i];
  return WarpSum(sum);
}

__global__ void __launch_bounds__(kThreads) ExpertsKernel(const __grid_constant__ ExpertsArgs a) {
  extern __shared__ float smem[];
  float* x_s = smem;                  // [hidden]
  float* acc = smem + a.hidden;       // [hidden]
  float* act = acc + a.hidden;        // [inter]
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const bf16* x = RowPtr<const bf16>(a.x, t);
  for (int c = threadIdx.x; c < a.hidden; c += kThreads) {
    x_s[c] = ToFloat(x[c]);
    acc[c] = 0.0f;
  }
  bool bad = false;
  __syncthreads();  // x_s and acc ready

  for (int j = 0; j < a.k; ++j) {
    const int e = a.ids[t * a.k + j];
    if (e < 0 || e >= a.experts) {  // uniform across the CTA: no barrier is skipped unevenly
      bad = true;
      continue;
    }
    const float w = a.weights[t * a.k + j];
    const bf16* gu = static_cast<const bf16*>(a.gate_up) + static_cast<int64_t>(e) * 2 * a.inter *
                                                               a.hidden;
    const bf16* gu_bias = static_cast<const bf16*>(a.gate_up_bias) + static_cast<int64_t>(e) * 2 *
                                                                         a.inter;
    for (int i = warp; i < a.inter; i += kWarps) {
      const float g_raw = WarpDot(gu + (2 * i) * static_cast<int64_t>(a.hidden), x_s, a.hidden,
                                  lane) + ToFloat(gu_bias[2 * i]);
      const float u_raw = WarpDot(gu + (2 * i + 1) * static_cast<int64_t>(a.hidden), x_s,
                                  a.hidden, lane) + ToFloat(gu_bias[2 * i + 1]);
      const float g = fminf(g_raw, a.limit);
      const float u = fminf(fmaxf(u_raw, -a.limit), a.limit);
      if (lane == 0) act[i] = (u + 1.0f) * (g / (1.0f + expf(-a.alpha * g)));
    }
    __syncthreads();  // act complete before the down projection reads it

    const bf16* dn = static_cast<const bf16*>(a.down) + static_cast<int64_t>(e) * a.hidden *
                                                          a.inter;
    const bf16* dn_bias = static_cast<const bf16*>(a.down_bias) + static_cast<int64_t>(e) *
                                                                      a.hidden;
    for (int c = warp; c < a.hidden; c += kWarps) {
      const float y = WarpDot(dn + c * static_cast<int64_t>(a.inter), act, a.inter, lane);
      if (lane == 0) acc[c] += w * (y + ToFloat(dn_bias[c]));
    }
    __syncthreads();  // act is rewritten by the next selection; acc final after the last
  }

  bf16* out = RowPtr<bf16>(a.out, t);
  for (int c = threadIdx.x; c < a.hidden; c += kThreads) {
    out[c] = bad ? QuietNaN<bf16>() : FromFloat<bf16>(acc[c]);
  }
}

}  // namespace

cudaError_t LaunchExperts(const ExpertsArgs& args, cudaStream_t stream) {
  if (args.x.rows == 0) return cudaSuccess;
  const int64_t smem = ExpertsSharedBytes(args.hidden, args.inter);
  if (const cudaError_t err = AllowDynamicSharedMemory<ExpertsKernel>(smem); err != cudaSuccess) {
    return err;
  }
  ExpertsKernel<<<static_cast<unsigned>(args.x.rows), kThreads, static_cast<size_t>(smem),
                  stream>>>(args);
  return cudaGetLastError();
}

}  // namespace xserv::kernels::cuda
