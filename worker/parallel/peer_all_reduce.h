// Peer all-reduce: a bf16 sum across the GPUs of one host through peer-mapped buffers (CUDA IPC
// across processes), for the small, latency-bound all-reduces of tensor-parallel decode (two per
// layer of a few KB each), where NCCL's ring/tree protocols cost more than the data.
//
// Each rank owns one buffer that every peer maps: per-block flags, then two halves for the
// payload (consecutive calls alternate, so a call never overwrites data a peer may still read
// from the previous one). The kernel runs a fixed grid of kPeerBlocks CTAs; block b synchronises
// only with block b of each peer (flags carry a per-block call count kept on the device, so the
// kernel can be captured in a CUDA graph and replayed). Both forms sum the ranks' values in fp32
// in rank order 0..world-1 and round once, so every rank gets identical bits, and the one-shot
// and two-shot forms give the same bits as each other:
//   one-shot: copy the input into the own buffer, barrier, each rank sums everything itself
//             (reads world x bytes over the links); best for the smallest messages;
//   two-shot: copy, barrier, rank r sums slice r (reduce-scatter) into its own buffer, barrier,
//             every rank gathers the reduced slices (reads 2 x bytes).
// A dead peer leaves a block spinning; after kPeerTimeoutNs it traps, so the context fails and
// the worker exits (the supervisor restarts the replica) instead of hanging.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xserv::parallel {

inline constexpr int kPeerMaxRanks = 8;
inline constexpr int kPeerBlocks = 32;
// Bytes at the start of each rank's buffer for flags: [kPeerBlocks][kPeerMaxRanks] uint32.
inline constexpr int64_t kPeerFlagBytes = 4096;
inline constexpr uint64_t kPeerTimeoutNs = 20'000'000'000ULL;

struct PeerBuffers {
  // Every rank's buffer as mapped in this process (buffers[rank] is the own one):
  // [kPeerFlagBytes of flags][half 0: half_bytes][half 1: half_bytes].
  void* buffers[kPeerMaxRanks] = {};
  uint32_t* counters = nullptr;  // own device memory, [kPeerBlocks][2]: calls, barriers; zeroed
  int rank = 0;
  int world = 0;
  int64_t half_bytes = 0;  // a multiple of 16 * world
};

// In place on `count` bf16 values at `data` (16-byte aligned, count * 2 a multiple of 16 and at
// most half_bytes). Every rank must call with the same count and form, in the same order
// (PeerGroup decides the form from the count and settings the ranks agreed on).
cudaError_t LaunchPeerAllReduceBf16(const PeerBuffers& peers, void* data, int64_t count,
                                    bool two_shot, cudaStream_t stream);

}  // namespace xserv::parallel
