// The persistent step's shared-memory ring form (persistent_step.h, PersistentStepArgs::smem_ring).
//
// One CTA of kWarps warps per SM. In every phase CTA c owns the rows [c * per, (c + 1) * per)
// (per = ceil(n / CTAs)), taken in chunks of up to 16 rows that fit half of the ring (kHalfBytes).
// The CTA's chunks over all phases form one sequence: while chunk j computes from one half, chunk
// j + 1 streams into the other by cp.async (all threads, 16 bytes each), whether it belongs to the
// same phase or a later one: the weights are constants, so the next phase's first chunk is in
// flight while the CTA waits at the barrier (where the register form could hold one batch).
// A chunk's rows go to the warps one row each; a warp reads a row's 16-byte chunks lane, lane +
// 32, ... in increasing order with the GEMV's arithmetic (gemv.cu: one fp32 partial per 16 codes
// scaled by its block, a butterfly sum), so every output has the GEMV's bits.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tools/persistent_common.cuh"
#include "kernels/cuda/tools/persistent_step.h"

namespace xserv::kernels::cuda::bench {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kCodes = 16;  // E4M3 codes per 16-byte load
constexpr int kBlock = 128;
constexpr int kMaxK = 12288;
constexpr int kXBytes = kMaxK * 2;     // x staged as bf16
constexpr int kHalfBytes = 96 * 1024;  // one chunk of rows
constexpr int kMaxChunkRows = kWarps;  // a row per warp
constexpr int kSmemBytes = kXBytes + 2 * kHalfBytes;

struct Block {
  int first = 0, rows = 0;
};

__device__ __forceinline__ Block BlockOf(int n) {
  const int per = (n + gridDim.x - 1) / gridDim.x;
  const int first = min(n, static_cast<int>(blockIdx.x) * per);
  return {first, min(n, first + per) - first};
}

__device__ __forceinline__ int ChunkRows(int k) { return min(kMaxChunkRows, kHalfBytes / k); }

// Whether phase i has rows for this CTA (latency phases have none).
__device__ __forceinline__ bool Streams(const StreamPhase& p) {
  return p.w != nullptr && BlockOf(p.n).rows > 0;
}

__global__ void __launch_bounds__(kThreads, 1)
    PersistentRingKernel(const __grid_constant__ PersistentStepArgs s) {
  extern __shared__ uint4 smem[];
  uint4* s_x = smem;  // [k / 8] chunks of 8 bf16
  uint8_t* ring = reinterpret_cast<uint8_t*>(smem) + kXBytes;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;

  // Chunk q of phase i into half h (no rows past the block: a short last chunk).
  const auto copy = [&](int i, int q, int h) {
    const StreamPhase& p = s.phases[i];
    const Block b = BlockOf(p.n);
    const int cr = ChunkRows(p.k);
    const int rows = min(cr, b.rows - q * cr);
    const uint8_t* src = p.w + int64_t{b.first + q * cr} * p.k;
    uint8_t* dst = ring + h * kHalfBytes;
    const int vecs = rows * p.k / 16;
    for (int v = threadIdx.x; v < vecs; v += kThreads) CpAsync16(dst + v * 16, src + v * 16, 16);
  };
  // The chunk after chunk q of phase i: the next of the block, else the first of the next phase
  // that streams; the phase index is num_phases when none is left.
  const auto next_of = [&](int i, int q, int* ni, int* nq) {
    const StreamPhase& p = s.phases[i];
    if ((q + 1) * ChunkRows(p.k) < BlockOf(p.n).rows) {
      *ni = i;
      *nq = q + 1;
      return;
    }
    *nq = 0;
    *ni = i + 1;
    while (*ni < s.num_phases && !Streams(s.phases[*ni])) ++*ni;
  };

  int first = 0;
  while (first < s.num_phases && !Streams(s.phases[first])) ++first;
  if (first < s.num_phases) copy(first, 0, 0);
  CpAsyncCommit();
  int half = 0;  // the half the next chunk to compute is in
  for (int i = 0; i < s.num_phases; ++i) {
    const StreamPhase p = s.phases[i];
    if (i > 0) GridBarrier(s.barrier, static_cast<unsigned>(i) * gridDim.x);
    if (p.w == nullptr) {
      RunLatencyPhase<kThreads>(p);
      continue;
    }
    const Block b = BlockOf(p.n);
    if (b.rows == 0) continue;
    const int x_chunks = p.k / 8, chunks = p.k / kCodes, cr = ChunkRows(p.k);
    const int scale_cols = (p.k + kBlock - 1) / kBlock;
    for (int c = threadIdx.x; c < x_chunks; c += kThreads) {
      s_x[c] = static_cast<const uint4*>(p.x)[c];
    }
    for (int q = 0; q * cr < b.rows; ++q) {
      int ni = 0, nq = 0;
      next_of(i, q, &ni, &nq);
      if (ni < s.num_phases) copy(ni, nq, half ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();  // this thread's copies of chunk q (the next one may still fly)
      __syncthreads();   // everyone's, and x
      const int rows = min(cr, b.rows - q * cr);
      const uint8_t* buf = ring + half * kHalfBytes;
      for (int r = warp; r < rows; r += kWarps) {
        const int row = b.first + q * cr + r;
        const uint4* w = reinterpret_cast<const uint4*>(buf + r * p.k);
        const float* scale_row = p.scales + (row / kBlock) * scale_cols;
        float acc = 0.0f;
#pragma unroll 4
        for (int c = lane; c < chunks; c += kWarpSize) {
          float xf[kCodes];
          UnpackBf16x8(s_x[2 * c], xf);
          UnpackBf16x8(s_x[2 * c + 1], xf + 8);
          const float scale = __ldg(scale_row + c * kCodes / kBlock);
          acc = fmaf(Fp8Dot16(w[c], xf), scale, acc);
        }
        const float sum = WarpSum(acc);
        if (lane == 0) static_cast<__nv_bfloat16*>(p.out)[row] = __float2bfloat16_rn(sum);
      }
      __syncthreads();  // this half is free for the chunk after next
      half ^= 1;
    }
  }
  CpAsyncWait<0>();  // nothing left in flight at exit (the last commit is empty)
}

}  // namespace

cudaError_t LaunchPersistentRing(const PersistentStepArgs& args, int max_k, cudaStream_t stream) {
  if (max_k > kMaxK) return cudaErrorInvalidValue;
  // One CTA per SM: its shared memory takes most of one.
  return LaunchOnEveryResidentCta<PersistentRingKernel>(args, kThreads, kSmemBytes, stream);
}

}  // namespace xserv::kernels::cuda::bench
