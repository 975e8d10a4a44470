// NcclCommunicator: the Communicator over NCCL for the CUDA backend. Every buffer is device memory
// of the current device; every call is enqueued on the stream given at creation (the CUDA
// backend's compute stream), so a collective inside a forward pass is ordered with the kernels
// around it and the host never waits for it. Used for the model's tensor-parallel all-reduces;
// host-side control traffic (step plans, KV agreement) stays on a Gloo communicator.
//
// Rendezvous: rank 0 creates the NCCL unique id and publishes it under "<prefix>/nccl-id" in the
// KeyValueStore (the leader's Rendezvous store: no shared filesystem); the others read it.
// Not thread-safe: one engine-loop thread per process, like the backend.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/kv_store.h"

namespace xserv::parallel {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<KeyValueStore> store;
  std::string prefix;  // non-empty; distinct per group
  void* stream = nullptr;  // cudaStream_t the collectives run on
  std::chrono::milliseconds timeout{300000};  // for reading the id and the peers' buffers
  // Bf16 sums of at most peer_max_bytes go through buffers the ranks map from each other
  // (peer_all_reduce.h) instead of NCCL: one-shot up to peer_one_shot_max_bytes, two-shot above.
  // 0: NCCL only. Falls back to NCCL (on every rank) when the GPUs cannot map each other's memory
  // or the ranks' values differ.
  int64_t peer_max_bytes = 0;
  int64_t peer_one_shot_max_bytes = 0;
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options);

}  // namespace xserv::parallel
