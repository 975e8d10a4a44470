#include "router/server/router_state.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace xserv::router {

uint64_t ShutdownBroadcast::Subscribe(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (fired_) {
    fn();
    return 0;
  }
  const uint64_t id = next_id_++;
  subscribers_.emplace(id, std::move(fn));
  return id;
}

void ShutdownBroadcast::Unsubscribe(uint64_t id) {
  std::lock_guard lock(mu_);
  subscribers_.erase(id);
}

void ShutdownBroadcast::Fire() {
  std::lock_guard lock(mu_);
  if (fired_.exchange(true)) return;
  for (auto& [id, fn] : subscribers_) fn();
  subscribers_.clear();
}

bool RouterState::LoadModelInfo() {
  auto info = pool->Info();
  if (!info) return false;
  model->vocab_size = static_cast<int32_t>(info->vocab_size());
  model->eos_token_ids.assign(info->eos_token_ids().begin(), info->eos_token_ids().end());
  model->max_context = static_cast<int32_t>(info->max_context());
  return true;
}

void RouterState::RefreshWorkerMetrics() {
  Metrics::WorkerTotals totals;
  int ready = 0;
  for (const ReplicaState& r : pool->Snapshot()) {
    ++totals.replicas_total;
    if (!r.ready) continue;
    ++ready;
    totals.running += r.load.num_running();
    totals.waiting += r.load.num_waiting();
    totals.kv_usage += r.load.kv_usage();
    totals.prefix_queries += static_cast<double>(r.load.prefix_cache_queries());
    totals.prefix_hits += static_cast<double>(r.load.prefix_cache_hits());
    totals.preemptions += static_cast<double>(r.load.num_preemptions_total());
    totals.overlapped_steps += static_cast<double>(r.load.num_overlapped_steps_total());
  }
  totals.replicas_ready = ready;
  if (ready > 0) totals.kv_usage /= ready;
  if (const auto info = pool->Info(); info && !info->kv_cache_dtype().empty()) {
    totals.cache_dtype = info->kv_cache_dtype();
    totals.block_size = info->block_size();
    totals.num_blocks = static_cast<int64_t>(info->kv_capacity_blocks());
  }
  metrics.SetWorkerTotals(totals);
}

std::string RouterState::NewId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(prefix, "-", absl::Hex(rng(), absl::kZeroPad16), next_request.fetch_add(1));
}

bool Authorized(const RouterLimits& limits, std::string_view header) {
  if (limits.api_key.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  return header.size() == kBearer.size() + limits.api_key.size() &&
         header.substr(0, kBearer.size()) == kBearer &&
         header.substr(kBearer.size()) == limits.api_key;
}

}  // namespace xserv::router
