// xserv-supervisor: the main job. Launches workers (one per device or CPU rank) and the router
// from flags or a JSON topology, heals them, and drains on SIGTERM. See supervisor.h.
#include <unistd.h>

#include <filesystem>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/shutdown_signals.h"
#include "deploy/supervisor/supervisor.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  xserv::BlockShutdownSignals();  // handled synchronously in Supervisor::Run

  CLI::App app{"xserv-supervisor: launches and heals xserv workers and the router"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::supervisor::Topology t;
  std::string topology_file;
  std::string devices;
  std::string bin_dir;
  bool workers_only = false;
  app.add_option("--topology", topology_file, "JSON topology (flags given too override it)");
  app.add_option("--model", t.model_dir, "HF model directory");
  app.add_option("--backend", t.backend, "cpu or cuda")->capture_default_str();
  app.add_option("--tp", t.tp, "tensor-parallel ranks per replica")->capture_default_str();
  app.add_option("--pp", t.pp, "pipeline stages per replica")->capture_default_str();
  app.add_option("--replicas", t.replicas)->capture_default_str();
  app.add_option("--devices", devices, "comma-separated GPU ordinals (cuda)");
  app.add_option("--host", t.host, "router bind address")->capture_default_str();
  app.add_option("--worker-host", t.worker_host,
                 "workers' bind address (0.0.0.0 when the router is elsewhere)")
      ->capture_default_str();
  app.add_option("--http-port", t.http_port)->capture_default_str();
  app.add_option("--port", t.http_port, "alias of --http-port");
  std::string port_file;
  app.add_option("--port-file", port_file, "passed to the router: it writes its HTTP port there");
  app.add_option("--grpc-port", t.grpc_port, "router public gRPC port")->capture_default_str();
  app.add_option("--worker-base-port", t.worker_base_port)->capture_default_str();
  app.add_option("--worker-arg", t.worker_args, "extra worker flag (repeatable)");
  app.add_option("--router-arg", t.router_args, "extra router flag (repeatable)");
  app.add_flag("--workers-only", workers_only, "do not start a router");
  app.add_option("--grace-period-s", t.grace_period_s,
                 "SIGTERM: how long the router, then the workers, may take to drain (the "
                 "router's --drain-timeout-s is this minus 5 s unless --router-arg sets it)")
      ->capture_default_str();
  app.add_option("--unhealthy-restart-s", t.unhealthy_restart_s,
                 "restart a ready replica whose leader fails health probes this long (0: never)")
      ->capture_default_str();
  app.add_option("--max-start-failures", t.max_start_failures,
                 "give up a replica after this many failed starts in a row, the router after "
                 "this many exits within a minute of starting; the supervisor exits 1 when no "
                 "replica or no router is left (0: never give up)")
      ->capture_default_str();
  app.add_option("--bin-dir", bin_dir, "where xserv-worker/xserv-router are (default: beside me)");
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-supervisor")) {
    return *code;
  }
  if (!topology_file.empty()) {
    auto loaded = xserv::supervisor::LoadTopologyFile(topology_file);
    if (!loaded.ok()) {
      spdlog::error("{}", loaded.status().ToString());
      return 2;
    }
    // Flags given explicitly win over the file.
    xserv::supervisor::Topology merged = *loaded;
    if (app.count("--model")) merged.model_dir = t.model_dir;
    if (app.count("--backend")) merged.backend = t.backend;
    if (app.count("--tp")) merged.tp = t.tp;
    if (app.count("--pp")) merged.pp = t.pp;
    if (app.count("--replicas")) merged.replicas = t.replicas;
    if (app.count("--http-port")) merged.http_port = t.http_port;
    if (app.count("--grpc-port")) merged.grpc_port = t.grpc_port;
    if (app.count("--host")) merged.host = t.host;
    if (app.count("--worker-host")) merged.worker_host = t.worker_host;
    if (app.count("--worker-base-port")) merged.worker_base_port = t.worker_base_port;
    if (app.count("--grace-period-s")) merged.grace_period_s = t.grace_period_s;
    if (app.count("--unhealthy-restart-s")) merged.unhealthy_restart_s = t.unhealthy_restart_s;
    if (app.count("--max-start-failures")) merged.max_start_failures = t.max_start_failures;
    if (app.count("--worker-arg")) merged.worker_args = t.worker_args;
    if (app.count("--router-arg")) merged.router_args = t.router_args;
    t = merged;
  }
  if (!devices.empty()) {  // replaces the file's list
    t.devices.clear();
    for (const std::string& ordinal : std::vector<std::string>(absl::StrSplit(devices, ','))) {
      int device = -1;
      if (!absl::SimpleAtoi(ordinal, &device) || device < 0) {
        spdlog::error("--devices: '{}' is not a GPU ordinal (e.g. --devices 0,1)", ordinal);
        return 2;
      }
      t.devices.push_back(device);
    }
  }
  if (workers_only) t.start_router = false;
  if (!port_file.empty()) t.router_args.insert(t.router_args.end(), {"--port-file", port_file});
  if (auto status = t.Validate(); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 2;
  }
  if (bin_dir.empty()) {
    bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  }
  return xserv::supervisor::Supervisor(t, bin_dir).Run();
}
