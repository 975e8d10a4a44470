// Topology: what the supervisor launches, from flags or a JSON file. Plain data + Validate().
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::supervisor {

struct Topology {
  std::string model_dir;
  std::string backend = "cpu";         // cpu | cuda
  int tp = 1;
  int pp = 1;
  int replicas = 1;
  std::vector<int> devices;            // GPU ordinals, tp*pp per replica (cuda)
  std::string host = "127.0.0.1";      // router HTTP/gRPC bind address
  std::string worker_host = "127.0.0.1";  // workers' bind address (0.0.0.0 when the router runs
                                          // elsewhere, e.g. another Kubernetes pod)
  int http_port = 8080;
  int grpc_port = 50051;
  int worker_base_port = 50100;        // replica r, rank k listens on base + r*tp*pp + k
                                       // (k = pp_rank * tp + tp_rank; the leader, the router's
                                       // endpoint, is TP rank 0 of the last stage)
  std::vector<std::string> worker_args;  // passed through to every worker
  std::vector<std::string> router_args;  // passed through to the router
  bool start_router = true;            // false: workers only (compose "workers" service)
  double grace_period_s = 35;          // SIGTERM drain budget: the workers' 30 s drain plus the
                                       // leader's stop of its peers and server shutdown
  int max_start_failures = 5;          // a replica that fails this many starts in a row without
                                       // once getting ready, or a router that exits this often
                                       // within a minute of its start, is given up (a
                                       // configuration no restart can fix); 0: never give up
  double unhealthy_restart_s = 30;     // a ready replica whose leader answers no health probe,
                                       // or reports FAILED, this long is restarted (a hung rank
                                       // or collective); 0: never

  int ranks_per_replica() const { return tp * pp; }
  int WorkerPort(int replica, int rank) const {
    return worker_base_port + replica * ranks_per_replica() + rank;
  }
  int leader_rank() const { return (pp - 1) * tp; }
  std::vector<std::string> LeaderAddresses() const;

  absl::Status Validate() const;
};

// Reads a JSON topology file whose keys match the flag names (model, backend, tp, pp, replicas,
// devices, host, worker_host, http_port, grpc_port, worker_base_port, worker_args, router_args,
// start_router, grace_period_s, unhealthy_restart_s, max_start_failures). Unknown keys are an
// error.
absl::StatusOr<Topology> LoadTopologyFile(const std::string& path);

}  // namespace xserv::supervisor
