// The loop of a peer rank (any rank of a multi-rank replica but the leader): receive the leader's
// DeviceStep over the replica communicator, run it on this rank's shard (its tensor-parallel
// slice of its pipeline stage), repeat. Peers hold no scheduler, requests or sampler; the leader
// decides everything and the peers follow step for step.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/device_step.h"
#include "worker/parallel/communicator.h"

namespace xserv::engine {

// Atomics: the worker's signal-handling thread reads them while the loop runs.
struct PeerLoopStats {
  std::atomic<int64_t> steps = 0;       // kRun steps executed
  std::atomic<int64_t> heartbeats = 0;  // kIdle received
};

// Returns OK when the leader sends kStop; the first communicator, parse or device error
// otherwise (the replica is then broken and the process should exit for a restart).
absl::Status RunPeerLoop(parallel::Communicator& comm, int root, DeviceStepRunner& runner,
                         PeerLoopStats* stats = nullptr);

}  // namespace xserv::engine
