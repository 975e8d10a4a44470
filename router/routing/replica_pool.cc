#include "router/routing/replica_pool.h"

#include <algorithm>
#include <limits>

#include "spdlog/spdlog.h"

namespace xserv::router {

namespace wv1 = xserv::worker::v1;

ReplicaLease::~ReplicaLease() { pool_->Release(index_); }

ReplicaPool::ReplicaPool(ReplicaPoolOptions options) : options_(std::move(options)) {
  for (const std::string& address : options_.addresses) {
    Replica r;
    r.state.address = address;
    // Reconnect quickly: a restarted replica should be back in rotation within a poll or two,
    // not after gRPC's default exponential backoff (up to two minutes).
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    r.channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    r.stub = wv1::Worker::NewStub(r.channel);
    replicas_.push_back(std::move(r));
  }
}

ReplicaPool::~ReplicaPool() { Stop(); }

void ReplicaPool::Start() {
  ProbeAll();
  poller_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_cv_.wait_for(lock, options_.poll_interval, [this] { return stop_; })) {
      lock.unlock();
      ProbeAll();
      lock.lock();
    }
  });
}

void ReplicaPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void ReplicaPool::ProbeAll() {
  for (size_t i = 0; i < replicas_.size(); ++i) Probe(i);
}

void ReplicaPool::Probe(size_t i) {
  Replica& r = replicas_[i];
  auto deadline = [&] { return std::chrono::system_clock::now() + options_.rpc_timeout; };
  grpc::ClientContext health_ctx;
  health_ctx.set_deadline(deadline());
  wv1::HealthResponse health;
  grpc::Status status = r.stub->Health(&health_ctx, wv1::HealthRequest(), &health);
  wv1::LoadResponse load;
  if (status.ok() && health.state() == wv1::HealthResponse::STATE_SERVING) {
    grpc::ClientContext load_ctx;
    load_ctx.set_deadline(deadline());
    status = r.stub->Load(&load_ctx, wv1::LoadRequest(), &load);
  }
  bool need_info = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReplicaState& s = r.state;
    const bool serving = status.ok() && health.state() == wv1::HealthResponse::STATE_SERVING;
    if (serving) {
      if (!s.ready) spdlog::info("replica {} is ready", s.address);
      s.ready = true;
      s.consecutive_failures = 0;
      s.load = load;
      s.detail.clear();
      need_info = !info_.has_value();
    } else {
      s.detail =
          status.ok() ? wv1::HealthResponse::State_Name(health.state()) : status.error_message();
      // A draining or starting replica leaves rotation at once; an unreachable one after a few
      // failed probes (a single lost probe should not eject it).
      if (status.ok() || ++s.consecutive_failures >= options_.failures_to_eject) {
        if (s.ready) spdlog::warn("replica {} left rotation: {}", s.address, s.detail);
        s.ready = false;
      }
    }
  }
  if (need_info) {
    grpc::ClientContext info_ctx;
    info_ctx.set_deadline(deadline());
    wv1::InfoResponse info;
    if (r.stub->Info(&info_ctx, wv1::InfoRequest(), &info).ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!info_) info_ = std::move(info);
    }
  }
}

std::unique_ptr<ReplicaLease> ReplicaPool::Acquire(std::span<const uint32_t> prompt,
                                                   std::span<const int> exclude) {
  // Affinity: FNV-1a over the block-aligned head of the prompt.
  const size_t n = std::min(prompt.size(), options_.affinity_tokens) / 16 * 16;
  uint64_t hash = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) hash = (hash ^ prompt[i]) * 1099511628211ULL;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> candidates;
  for (int i = 0; i < static_cast<int>(replicas_.size()); ++i) {
    if (replicas_[i].state.ready && std::find(exclude.begin(), exclude.end(), i) == exclude.end()) {
      candidates.push_back(i);
    }
  }
  if (candidates.empty()) return nullptr;
  auto score = [&](int i) {
    const ReplicaState& s = replicas_[i].state;
    return s.in_flight + static_cast<double>(s.load.num_waiting()) + 8.0 * s.load.kv_usage();
  };
  int best = candidates[0];
  for (int i : candidates) {
    if (score(i) < score(best)) best = i;
  }
  if (n > 0) {
    const int preferred = candidates[hash % candidates.size()];
    if (score(preferred) <= score(best) + options_.affinity_slack) best = preferred;
  }
  ++replicas_[best].state.in_flight;
  return std::unique_ptr<ReplicaLease>(
      new ReplicaLease(this, best, replicas_[best].state.address, replicas_[best].stub.get()));
}

void ReplicaPool::Release(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  --replicas_[index].state.in_flight;
}

void ReplicaPool::ReportFailure(int index, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ReplicaState& s = replicas_[index].state;
  s.detail = why;
  if (++s.consecutive_failures >= options_.failures_to_eject && s.ready) {
    spdlog::warn("replica {} left rotation after failed requests: {}", s.address, why);
    s.ready = false;
  }
}

std::vector<ReplicaState> ReplicaPool::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaState> out;
  for (const Replica& r : replicas_) out.push_back(r.state);
  return out;
}

bool ReplicaPool::AnyReady() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [](const Replica& r) { return r.state.ready; });
}

std::optional<wv1::InfoResponse> ReplicaPool::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

}  // namespace xserv::router
