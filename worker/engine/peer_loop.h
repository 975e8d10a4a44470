// The loop of a peer rank (any rank of a multi-rank replica but the leader): receive the leader's
// DeviceStep over the replica communicator, run it on this rank's shard (its tensor-parallel
// slice of its pipeline stage), repeat. Peers hold no scheduler, requests or sampler; the leader
// decides everything and the peers follow step for step.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/device_step.h"
#include "worker/parallel/communicator.h"

namespace xserv::engine {

struct PeerLoopStats {
  int64_t steps = 0;       // kRun steps executed
  int64_t heartbeats = 0;  // kIdle received
};

// Returns OK when the leader sends kStop; the first communicator, parse or device error
// otherwise (the replica is then broken and the process should exit for a restart).
absl::Status RunPeerLoop(parallel::Communicator& comm, int root, DeviceStepRunner& runner,
                         PeerLoopStats* stats = nullptr);

}  // namespace xserv::engine
