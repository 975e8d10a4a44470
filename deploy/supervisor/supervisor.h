// Supervisor: launches the worker processes of every replica and the router from a Topology,
// waits for readiness (with progress), probes health, restarts a failed replica as a whole (its
// communicators must be rebuilt) or a failed router with exponential backoff, and on SIGTERM
// drains: the router first (stops admitting, finishes in-flight), then the workers, each within
// the grace period, then exits 0. What restarts cannot fix is given up: a replica that fails
// max_start_failures starts in a row stays down, and with no replica or no router left the
// supervisor drains and exits 1 (for the platform to report and restart it).
//
// Runs on the main thread only (Run blocks); child processes are plain fork/exec.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deploy/supervisor/backoff.h"
#include "deploy/supervisor/topology.h"
#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::supervisor {

class Supervisor {
 public:
  Supervisor(Topology topology, std::string bin_dir);
  // Returns the process exit code. SIGTERM/SIGINT must be blocked in every thread beforehand.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;
  struct Child {
    std::string name;
    std::vector<std::string> argv;
    std::vector<std::string> env;  // extra KEY=VALUE
    pid_t pid = -1;
    Clock::time_point started{};
  };
  // kGivenUp: failed max_start_failures starts in a row; left down for good.
  enum class ReplicaState { kStarting, kReady, kBackoff, kGivenUp };
  struct Replica {
    std::vector<Child> ranks;
    ReplicaState state = ReplicaState::kStarting;
    Clock::time_point restart_at{};
    RestartBackoff backoff;
    std::unique_ptr<xserv::worker::v1::Worker::Stub> leader;
    uint64_t epoch = 0;  // launches so far: the ranks of one launch share it (--replica-epoch)
    int start_failures = 0;  // failures since it was last ready
    std::string progress;  // why the leader is not ready yet (LeaderServing's detail)
    // kReady: when the leader last answered healthy, and when it was last probed.
    Clock::time_point healthy_at{}, probed_at{};
  };

  bool Launch(Child& child);
  void LaunchReplica(size_t r);
  void KillReplica(size_t r, int sig);
  // After replica r failed (`why`): restart it with backoff, or give it up when it has failed
  // max_start_failures starts in a row. Kills what is left of it either way.
  void OnReplicaFailure(size_t r, const std::string& why);
  // Why the supervisor cannot go on (every replica or the router given up); empty otherwise.
  std::string GivenUpReason() const;
  void ReapChildren();
  void ProbeStarting();
  // Ready replicas: a leader that has not answered healthy (SERVING or DRAINING) for
  // unhealthy_restart_s is killed with its replica, which is then restarted with backoff.
  void ProbeReady();
  // Health of the replica's leader: true when SERVING; otherwise `detail` says why not (the
  // weight-loading progress while STARTING, another state by name, or the probe's RPC error).
  bool LeaderServing(Replica& replica, std::string* detail = nullptr);
  // The leader's health state; nullopt when it does not answer within the probe deadline
  // (`failure` then gets the RPC's status).
  std::optional<xserv::worker::v1::HealthResponse> LeaderHealth(Replica& replica,
                                                                std::string* failure = nullptr);
  void Drain();
  bool WaitExit(std::vector<Child*> children, std::chrono::milliseconds timeout);
  std::vector<std::string> WorkerArgv(int replica, int rank, uint64_t epoch) const;
  std::vector<std::string> RouterArgv() const;

  const Topology topology_;
  const std::string bin_dir_;
  std::vector<Replica> replicas_;
  Child router_;
  RestartBackoff router_backoff_;
  Clock::time_point router_restart_at_{};
  bool router_wanted_ = false;
  bool router_given_up_ = false;
};

}  // namespace xserv::supervisor
