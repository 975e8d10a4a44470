#include "deploy/supervisor/supervisor.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grpc/status_conversion.h"
#include "common/shutdown_signals.h"
#include "spdlog/spdlog.h"

namespace xserv::supervisor {

namespace wv1 = xserv::worker::v1;

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::chrono::milliseconds Uptime(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t);
}

}  // namespace

Supervisor::Supervisor(Topology topology, std::string bin_dir)
    : topology_(std::move(topology)), bin_dir_(std::move(bin_dir)) {
  replicas_.resize(topology_.replicas);
  for (int r = 0; r < topology_.replicas; ++r) {
    for (int k = 0; k < topology_.ranks_per_replica(); ++k) {
      Child child;
      child.name = absl::StrCat("worker r", r, "/rank", k);
      if (topology_.backend == "cuda" && !topology_.devices.empty()) {
        child.env.push_back(absl::StrCat(
            "CUDA_VISIBLE_DEVICES=", topology_.devices[r * topology_.ranks_per_replica() + k]));
      }
      replicas_[r].ranks.push_back(std::move(child));
    }
    grpc::ChannelArguments args;  // probe a (re)starting worker promptly, not after gRPC backoff
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    replicas_[r].leader = wv1::Worker::NewStub(grpc::CreateCustomChannel(
        topology_.LeaderAddresses()[r], grpc::InsecureChannelCredentials(), args));
  }
  router_.name = "router";
  router_.argv = RouterArgv();
}

std::vector<std::string> Supervisor::WorkerArgv(int replica, int rank, uint64_t epoch) const {
  std::vector<std::string> argv = {bin_dir_ + "/xserv-worker",
                                   "--model", topology_.model_dir,
                                   "--backend", topology_.backend,
                                   "--host", topology_.worker_host,
                                   "--port", std::to_string(topology_.WorkerPort(replica, rank)),
                                   "--replica-id", std::to_string(replica)};
  if (topology_.ranks_per_replica() > 1) {
    const std::vector<std::string> layout = {
        "--tp-size", std::to_string(topology_.tp), "--tp-rank", std::to_string(rank % topology_.tp),
        "--pp-size", std::to_string(topology_.pp), "--pp-rank", std::to_string(rank / topology_.tp),
        "--leader-address", topology_.LeaderAddresses()[replica],
        "--replica-epoch", std::to_string(epoch)};
    argv.insert(argv.end(), layout.begin(), layout.end());
  }
  argv.insert(argv.end(), topology_.worker_args.begin(), topology_.worker_args.end());
  return argv;
}

std::vector<std::string> Supervisor::RouterArgv() const {
  std::vector<std::string> argv = {bin_dir_ + "/xserv-router",
                                   "--model", topology_.model_dir,
                                   "--workers", absl::StrJoin(topology_.LeaderAddresses(), ","),
                                   "--host", topology_.host,
                                   "--http-port", std::to_string(topology_.http_port),
                                   "--grpc-port", std::to_string(topology_.grpc_port)};
  // The router's drain fits in the grace period: its drain timeout, about 2 s to end what is
  // still running with an error, and its servers' stop. Given in router_args, that one wins.
  const bool drain_given =
      absl::c_any_of(topology_.router_args, [](const std::string& a) {
        return a == "--drain-timeout-s" || absl::StartsWith(a, "--drain-timeout-s=");
      });
  if (!drain_given) {
    argv.push_back(absl::StrFormat("--drain-timeout-s=%.3f",
                                   std::max(0.0, topology_.grace_period_s - 5)));
  }
  argv.insert(argv.end(), topology_.router_args.begin(), topology_.router_args.end());
  return argv;
}

bool Supervisor::Launch(Child& child) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    spdlog::error("fork for {} failed", child.name);
    return false;
  }
  if (pid == 0) {
    // A supervisor killed outright (kill -9, OOM) takes its children along: orphans would keep
    // the ports and GPUs and answer the probes of the supervisor started in its place.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // it died before prctl took effect
    UnblockAllSignals();  // children handle their own signals
    for (const std::string& kv : child.env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : child.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  child.pid = pid;
  child.started = Clock::now();
  spdlog::info("started {} (pid {}): {}", child.name, pid, absl::StrJoin(child.argv, " "));
  return true;
}

void Supervisor::LaunchReplica(size_t r) {
  Replica& replica = replicas_[r];
  ++replica.epoch;  // a restarted replica rebuilds its communicators under a new epoch
  for (size_t k = 0; k < replica.ranks.size(); ++k) {
    replica.ranks[k].argv = WorkerArgv(static_cast<int>(r), static_cast<int>(k), replica.epoch);
    Launch(replica.ranks[k]);
  }
  replica.state = ReplicaState::kStarting;
}

void Supervisor::KillReplica(size_t r, int sig) {
  for (Child& child : replicas_[r].ranks) {
    if (child.pid > 0) kill(child.pid, sig);
  }
}

void Supervisor::ReapChildren() {
  while (true) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    const std::string how = WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                                              : absl::StrCat("signal ", WTERMSIG(status));
    if (pid == router_.pid) {
      router_.pid = -1;
      const auto delay = router_backoff_.OnFailure(Uptime(router_.started));
      // The backoff counts exits within a minute of their start, in a row.
      if (topology_.max_start_failures > 0 &&
          router_backoff_.failures() >= topology_.max_start_failures) {
        spdlog::error("router exited ({}), {} times in a row soon after starting; giving up", how,
                      router_backoff_.failures());
        router_given_up_ = true;
        continue;
      }
      spdlog::warn("router exited ({}); restarting in {} ms", how, delay.count());
      router_restart_at_ = Clock::now() + delay;
      continue;
    }
    for (size_t r = 0; r < replicas_.size(); ++r) {
      Replica& replica = replicas_[r];
      for (Child& child : replica.ranks) {
        if (child.pid != pid) continue;
        child.pid = -1;
        if (replica.state == ReplicaState::kBackoff || replica.state == ReplicaState::kGivenUp) {
          continue;  // a rank we killed ourselves
        }
        OnReplicaFailure(r, absl::StrCat(child.name, " exited (", how, ")"));
      }
    }
  }
}

std::optional<wv1::HealthResponse> Supervisor::LeaderHealth(Replica& replica,
                                                             std::string* failure) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  wv1::HealthResponse health;
  const grpc::Status status = replica.leader->Health(&ctx, wv1::HealthRequest(), &health);
  if (!status.ok()) {
    if (failure != nullptr) {
      *failure = absl::StrCat("health probe: ", FromGrpcStatus(status).ToString());
    }
    return std::nullopt;
  }
  return health;
}

bool Supervisor::LeaderServing(Replica& replica, std::string* detail) {
  std::string failure;
  const std::optional<wv1::HealthResponse> health = LeaderHealth(replica, &failure);
  if (!health) {
    if (detail != nullptr) *detail = failure;
    return false;
  }
  // While STARTING the detail is the weight-loading progress; any other state is named.
  if (detail != nullptr) {
    *detail = health->state() == wv1::HealthResponse::STATE_STARTING
                  ? health->detail()
                  : absl::StrCat(wv1::HealthResponse::State_Name(health->state()), " ",
                                 health->detail());
  }
  return health->state() == wv1::HealthResponse::STATE_SERVING;
}

void Supervisor::ProbeReady() {
  if (topology_.unhealthy_restart_s <= 0) return;
  const auto limit = std::chrono::milliseconds(
      static_cast<int64_t>(topology_.unhealthy_restart_s * 1000));
  for (size_t r = 0; r < replicas_.size(); ++r) {
    Replica& replica = replicas_[r];
    if (replica.state != ReplicaState::kReady) continue;
    const auto now = Clock::now();
    if (now - replica.probed_at < std::chrono::seconds(1)) continue;
    replica.probed_at = now;
    const std::optional<wv1::HealthResponse> health = LeaderHealth(replica);
    const bool healthy = health && (health->state() == wv1::HealthResponse::STATE_SERVING ||
                                    health->state() == wv1::HealthResponse::STATE_DRAINING);
    if (healthy) {
      replica.healthy_at = Clock::now();
      continue;
    }
    if (Clock::now() - replica.healthy_at < limit) continue;
    const std::string why = health ? absl::StrCat("reports ", wv1::HealthResponse::State_Name(
                                                                  health->state()),
                                                  " ", health->detail())
                                   : std::string("does not answer health probes");
    OnReplicaFailure(r, absl::StrCat("the leader ", why, " for ",
                                     absl::SixDigits(topology_.unhealthy_restart_s), " s"));
  }
}

void Supervisor::OnReplicaFailure(size_t r, const std::string& why) {
  Replica& replica = replicas_[r];
  if (replica.state == ReplicaState::kStarting) ++replica.start_failures;
  KillReplica(r, SIGKILL);  // the survivors' communicators are useless; SIGKILL ends hung ranks
  if (topology_.max_start_failures > 0 && replica.start_failures >= topology_.max_start_failures) {
    spdlog::error("replica {}: {}; it failed {} starts in a row without getting ready: giving it "
                  "up (check its log above)",
                  r, why, replica.start_failures);
    replica.state = ReplicaState::kGivenUp;
    return;
  }
  const auto delay = replica.backoff.OnFailure(Uptime(replica.ranks[0].started));
  spdlog::warn("replica {}: {}; restarting it in {} ms", r, why, delay.count());
  replica.state = ReplicaState::kBackoff;
  replica.restart_at = Clock::now() + delay;
}

std::string Supervisor::GivenUpReason() const {
  if (router_given_up_) return "the router keeps failing";
  for (const Replica& replica : replicas_) {
    if (replica.state != ReplicaState::kGivenUp) return "";
  }
  return "every replica failed to start";
}

void Supervisor::ProbeStarting() {
  for (size_t r = 0; r < replicas_.size(); ++r) {
    Replica& replica = replicas_[r];
    if (replica.state == ReplicaState::kBackoff && Clock::now() >= replica.restart_at) {
      bool all_gone = true;
      for (const Child& c : replica.ranks) all_gone &= c.pid <= 0;
      if (all_gone) LaunchReplica(r);
    }
    if (replica.state == ReplicaState::kStarting && LeaderServing(replica, &replica.progress)) {
      replica.state = ReplicaState::kReady;
      replica.start_failures = 0;
      replica.healthy_at = replica.probed_at = Clock::now();
      spdlog::info("replica {} ready after {:.1f} s", r, SecondsSince(replica.ranks[0].started));
    }
  }
}

bool Supervisor::WaitExit(std::vector<Child*> children, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    bool any = false;
    for (Child* c : children) {
      if (c->pid <= 0) continue;
      int status = 0;
      if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
        spdlog::info("{} stopped ({})", c->name,
                     WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                                       : absl::StrCat("signal ", WTERMSIG(status)));
        c->pid = -1;
      } else {
        any = true;
      }
    }
    if (!any) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void Supervisor::Drain() {
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(topology_.grace_period_s * 1000));
  if (router_.pid > 0) {
    spdlog::info("draining the router");
    kill(router_.pid, SIGTERM);
    if (!WaitExit({&router_}, grace)) {
      spdlog::warn("router did not stop within the grace period; killing it");
      kill(router_.pid, SIGKILL);
      WaitExit({&router_}, std::chrono::seconds(5));
    }
  }
  std::vector<Child*> workers;
  for (Replica& replica : replicas_) {
    for (Child& child : replica.ranks) {
      if (child.pid > 0) {
        kill(child.pid, SIGTERM);
        workers.push_back(&child);
      }
    }
  }
  spdlog::info("draining {} worker process(es)", workers.size());
  if (!WaitExit(workers, grace)) {
    for (Child* c : workers) {
      if (c->pid > 0) kill(c->pid, SIGKILL);
    }
    WaitExit(workers, std::chrono::seconds(5));
  }
}

int Supervisor::Run() {
  for (size_t r = 0; r < replicas_.size(); ++r) LaunchReplica(r);
  router_wanted_ = topology_.start_router;
  const auto start = Clock::now();
  auto last_progress = start;
  bool router_started_once = false;
  while (true) {
    const int sig = WaitForShutdownSignal(std::chrono::milliseconds(100));
    if (sig != 0) {
      spdlog::info("signal {}: shutting down", sig);
      Drain();
      spdlog::info("supervisor stopped");
      return 0;
    }
    ReapChildren();
    ProbeStarting();
    ProbeReady();
    if (const std::string reason = GivenUpReason(); !reason.empty()) {
      spdlog::error("{}: stopping everything and exiting 1", reason);
      Drain();
      return 1;
    }
    int ready = 0, given_up = 0;
    for (const Replica& replica : replicas_) {
      ready += replica.state == ReplicaState::kReady;
      given_up += replica.state == ReplicaState::kGivenUp;
    }
    // The router starts once every replica is ready the first time or given up (or after 10
    // minutes with whatever is ready); afterwards it is restarted whenever it dies, ready
    // replicas or not.
    const bool startup_done =
        (ready > 0 && ready + given_up == static_cast<int>(replicas_.size())) ||
        (ready > 0 && Clock::now() - start > std::chrono::minutes(10));
    if (router_wanted_ && router_.pid <= 0 && (router_started_once || startup_done) &&
        Clock::now() >= router_restart_at_) {
      if (Launch(router_)) router_started_once = true;
    }
    if (!router_started_once && Clock::now() - last_progress > std::chrono::seconds(2)) {
      last_progress = Clock::now();
      std::string loading;
      for (size_t r = 0; r < replicas_.size(); ++r) {
        if (replicas_[r].state == ReplicaState::kStarting && !replicas_[r].progress.empty()) {
          absl::StrAppend(&loading, "; replica ", r, " ", replicas_[r].progress);
        }
      }
      spdlog::info("waiting for replicas: {}/{} ready ({:.0f} s){}", ready, replicas_.size(),
                   SecondsSince(start), loading);
    }
  }
}

}  // namespace xserv::supervisor
