// Kernels of the peer all-reduce (peer_all_reduce.h says what and why).
//
// Memory ordering across GPUs: a block's threads write their part of the payload, meet at
// __syncthreads, and then one thread per peer fences at system scope and stores the barrier
// count into that peer's flag slot with release semantics; the waiting side loads its own slots
// with acquire semantics before __syncthreads releases the block to read the peers' buffers
// (the pattern of vLLM's custom all-reduce and NCCL's LL protocols). Peer payloads are read with
// ld.global.cg, so no stale L1 line from an earlier call is ever used.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "worker/parallel/peer_all_reduce.h"

namespace xserv::parallel {
namespace {

using kernels::cuda::PackBf16x8;
using kernels::cuda::UnpackBf16x8;

constexpr int kThreads = 512;

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t* FlagSlot(const PeerBuffers& p, int owner, int block,
                                              int from) {
  return static_cast<uint32_t*>(p.buffers[owner]) + block * kPeerMaxRanks + from;
}
__device__ __forceinline__ uint4* Half(const PeerBuffers& p, int owner, uint32_t call) {
  return reinterpret_cast<uint4*>(static_cast<char*>(p.buffers[owner]) + kPeerFlagBytes +
                                  (call & 1) * p.half_bytes);
}

// Block b of every rank reaches this point before any goes on; `count` is the block's barrier
// count (the same sequence on every rank).
__device__ void Barrier(const PeerBuffers& p, uint32_t count) {
  __syncthreads();  // the block's writes before the barrier are done
  const int peer = threadIdx.x;
  if (peer < p.world) {
    __threadfence_system();
    StoreRelease(FlagSlot(p, peer, blockIdx.x, p.rank), count);
    const uint32_t* mine = FlagSlot(p, p.rank, blockIdx.x, peer);
    const uint64_t start = GlobalTimerNs();
    // Signed difference: a peer may already be one barrier ahead; counts may wrap.
    while (static_cast<int32_t>(LoadAcquire(mine) - count) < 0) {
      if (GlobalTimerNs() - start > kPeerTimeoutNs) __trap();  // a peer died mid-collective
    }
  }
  __syncthreads();
}

// Vector i of slice [begin, end) of the payload belongs to block b if i - begin = b * kThreads
// + t (mod kPeerBlocks * kThreads): the same on every rank, so block b only needs block b's
// barrier.
#define FOR_BLOCK_VECTORS(i, begin, end)                                              \
  for (int64_t i = (begin) + int64_t{blockIdx.x} * kThreads + threadIdx.x; i < (end); \
       i += int64_t{kPeerBlocks} * kThreads)

// The rank-ordered fp32 sum of vector i over all ranks; the own value comes from `own`.
__device__ __forceinline__ uint4 SumVector(const PeerBuffers& p, uint32_t call, int64_t i,
                                           const uint4& own) {
  float acc[8], v[8];
  for (int r = 0; r < p.world; ++r) {
    UnpackBf16x8(r == p.rank ? own : __ldcg(Half(p, r, call) + i), r == 0 ? acc : v);
    if (r > 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += v[e];
    }
  }
  return PackBf16x8(acc);
}

template <bool kTwoShot>
__global__ void __launch_bounds__(kThreads)
    PeerAllReduceKernel(const __grid_constant__ PeerBuffers p, uint4* data, int64_t vectors) {
  kernels::cuda::PdlBegin();  // a no-op wait on a plain launch; lets a PDL successor launch
  __shared__ uint32_t call_s, barrier_s;
  uint32_t* counters = p.counters + 2 * blockIdx.x;  // [calls, barriers] of this block
  if (threadIdx.x == 0) {
    call_s = counters[0] + 1;
    barrier_s = counters[1];
  }
  __syncthreads();
  const uint32_t call = call_s;
  uint32_t barrier = barrier_s;
  uint4* own = Half(p, p.rank, call);
  const auto slice_begin = [&](int s) { return vectors * s / p.world; };

  if (!kTwoShot) {
    FOR_BLOCK_VECTORS(i, 0, vectors) { own[i] = data[i]; }
    Barrier(p, ++barrier);
    FOR_BLOCK_VECTORS(i, 0, vectors) { data[i] = SumVector(p, call, i, data[i]); }
  } else {
    // Slice s is reduced by rank s, which reads it from every peer: each block copies its
    // vectors of the other ranks' slices (its own slice it reads from data directly).
    for (int s = 0; s < p.world; ++s) {
      if (s == p.rank) continue;
      FOR_BLOCK_VECTORS(i, slice_begin(s), slice_begin(s + 1)) { own[i] = data[i]; }
    }
    Barrier(p, ++barrier);
    FOR_BLOCK_VECTORS(i, slice_begin(p.rank), slice_begin(p.rank + 1)) {
      const uint4 sum = SumVector(p, call, i, data[i]);
      own[i] = sum;  // for the peers to gather
      data[i] = sum;
    }
    Barrier(p, ++barrier);
    for (int s = 0; s < p.world; ++s) {
      if (s == p.rank) continue;
      FOR_BLOCK_VECTORS(i, slice_begin(s), slice_begin(s + 1)) {
        data[i] = __ldcg(Half(p, s, call) + i);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    counters[0] = call;
    counters[1] = barrier;
  }
}

}  // namespace

cudaError_t LaunchPeerAllReduceBf16(const PeerBuffers& peers, void* data, int64_t count,
                                    bool two_shot, cudaStream_t stream) {
  const int64_t bytes = count * 2;
  if (peers.world < 2 || peers.world > kPeerMaxRanks || bytes % 16 != 0 ||
      bytes > peers.half_bytes || reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  uint4* vectors = static_cast<uint4*>(data);
  if (two_shot) {
    PeerAllReduceKernel<true><<<kPeerBlocks, kThreads, 0, stream>>>(peers, vectors, bytes / 16);
  } else {
    PeerAllReduceKernel<false><<<kPeerBlocks, kThreads, 0, stream>>>(peers, vectors, bytes / 16);
  }
  return cudaGetLastError();
}

}  // namespace xserv::parallel
