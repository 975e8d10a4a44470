#include "deploy/supervisor/topology.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace xserv::supervisor {

std::vector<std::string> Topology::LeaderAddresses() const {
  std::vector<std::string> out;
  for (int r = 0; r < replicas; ++r) {
    out.push_back(absl::StrCat("127.0.0.1:", WorkerPort(r, leader_rank())));
  }
  return out;
}

absl::Status Topology::Validate() const {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (backend != "cpu" && backend != "cuda") {
    return absl::InvalidArgumentError("--backend must be cpu or cuda");
  }
  if (tp < 1 || pp < 1 || replicas < 1) {
    return absl::InvalidArgumentError("--tp, --pp and --replicas must be at least 1");
  }
  // In 64 bits: the product of three ints overflows an int long before it is refused below.
  const int64_t ranks = int64_t{replicas} * tp * pp;
  if (ranks > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas x --tp x --pp is ", ranks, " worker processes; at most 65535"));
  }
  if (backend == "cuda" && !devices.empty() && static_cast<int64_t>(devices.size()) != ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices lists ", devices.size(), " GPUs; the topology needs ", ranks));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0) return absl::InvalidArgumentError("--devices must be GPU ordinals >= 0");
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices lists GPU ", devices[i], " twice: one process per GPU"));
      }
    }
  }
  for (int port : {http_port, grpc_port}) {  // 0: the router picks a free port
    if (port < 0 || port > 65535) return absl::InvalidArgumentError("ports must be in 0..65535");
  }
  if (worker_base_port < 1 || worker_base_port > 65535) {
    return absl::InvalidArgumentError("--worker-base-port must be in 1..65535");
  }
  if (worker_base_port + ranks > 65536) {
    return absl::InvalidArgumentError("worker ports run past 65535");
  }
  // Negated comparisons so NaN fails too; the upper bounds keep the millisecond casts defined.
  if (!(grace_period_s >= 0 && grace_period_s <= 1e7)) {
    return absl::InvalidArgumentError("--grace-period-s must be in 0..1e7");
  }
  if (!(unhealthy_restart_s >= 0 && unhealthy_restart_s <= 1e7)) {
    return absl::InvalidArgumentError("--unhealthy-restart-s must be in 0..1e7 (0: never)");
  }
  if (max_start_failures < 0 || max_start_failures > 1000000) {
    return absl::InvalidArgumentError("--max-start-failures must be in 0..1e6 (0: never give up)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Topology> LoadTopologyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read topology file " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(path + ": not a JSON object");
  }
  static const std::set<std::string> kKeys = {
      "model", "backend", "tp", "pp", "replicas", "devices", "host", "worker_host", "http_port",
      "grpc_port", "worker_base_port", "worker_args", "router_args", "start_router", "grace_period_s",
      "unhealthy_restart_s", "max_start_failures"};
  for (const auto& [key, value] : j.items()) {
    if (!kKeys.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key '", key, "'"));
    }
  }
  Topology t;
  try {  // nlohmann type errors become one InvalidArgument here
    t.model_dir = j.value("model", t.model_dir);
    t.backend = j.value("backend", t.backend);
    t.tp = j.value("tp", t.tp);
    t.pp = j.value("pp", t.pp);
    t.replicas = j.value("replicas", t.replicas);
    t.devices = j.value("devices", t.devices);
    t.host = j.value("host", t.host);
    t.worker_host = j.value("worker_host", t.worker_host);
    t.http_port = j.value("http_port", t.http_port);
    t.grpc_port = j.value("grpc_port", t.grpc_port);
    t.worker_base_port = j.value("worker_base_port", t.worker_base_port);
    t.worker_args = j.value("worker_args", t.worker_args);
    t.router_args = j.value("router_args", t.router_args);
    t.start_router = j.value("start_router", t.start_router);
    t.grace_period_s = j.value("grace_period_s", t.grace_period_s);
    t.unhealthy_restart_s = j.value("unhealthy_restart_s", t.unhealthy_restart_s);
    t.max_start_failures = j.value("max_start_failures", t.max_start_failures);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return t;
}

}  // namespace xserv::supervisor
