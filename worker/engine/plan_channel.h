// PlanChannel: the leader's serialised step plans (DeviceStep) to every other rank of its
// replica, point to point over the replica's communicator.
//
// Why not a broadcast: a broadcast blocks the leader until every rank takes the plan, and with
// steps in flight (SchedulerConfig::max_in_flight_steps) a rank may be busy in plan k — e.g. a
// tensor-parallel peer of the last stage waiting in an all-reduce for the leader itself — while
// the leader publishes plan k+1: a deadlock. Sends here only start; the leader keeps the bytes
// of its last `max_in_flight` plans alive and waits for older ones (every rank has taken a plan
// the leader has finished; heartbeats and block-move plans the ranks take without it). Each plan is two messages per rank: its size, then
// its bytes, on one tag, so they arrive in order.
//
// Owned by the loop thread of its rank (leader: engine loop; peer: peer loop); not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "worker/parallel/communicator.h"

namespace xserv::engine {

class PlanChannel {
 public:
  // `comm` spans the replica, `root` is the leader's rank in it; `max_in_flight` >= 1.
  PlanChannel(parallel::Communicator& comm, int root, int max_in_flight)
      : comm_(comm), root_(root), max_in_flight_(max_in_flight < 1 ? 1 : max_in_flight) {}

  // Leader: starts sending `bytes` to every other rank.
  absl::Status Send(std::string bytes);
  // Leader: waits until every plan sent has been taken (before stopping).
  absl::Status Flush();
  // Peer: the next plan from the leader (waits up to the communicator's timeout).
  absl::Status Receive(std::string& bytes);

 private:
  struct Sent {
    uint64_t size = 0;
    std::string bytes;
  };
  static constexpr int kTag = 0x7ffffff0;  // above every hidden-state tag (device_step.cc)

  parallel::Communicator& comm_;
  int root_;
  int max_in_flight_;
  std::deque<Sent> sent_;  // the last plans, oldest first; deque: elements never move
};

}  // namespace xserv::engine
