// RouterState: what every request handler of one router process shares: the model context, the
// replica pool, metrics, limits and the admission counters.
//
// Created by main() before the servers start and outlives them. Members are immutable after
// start-up except the atomics and the pool/metrics, which are thread-safe themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "router/metrics/metrics.h"
#include "router/openai/model_context.h"
#include "router/routing/replica_pool.h"

namespace xserv::router {

struct RouterLimits {
  int max_in_flight = 1024;  // requests streaming from workers at once
  int max_queued = 1024;     // requests waiting for an in-flight slot; beyond: 429
  std::chrono::milliseconds queue_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds request_timeout{std::chrono::minutes(30)};
  std::string api_key;                 // empty: no authentication
  int retries_before_first_token = 2;  // other replicas tried when a stream fails early
};

// The drain deadline's broadcast: every running GenerationRun subscribes a callback that makes
// it end its open choices with UNAVAILABLE, so a request the drain could not wait for gets an
// error (an SSE error event and [DONE], a 503, a gRPC status) rather than a cut connection.
class ShutdownBroadcast {
 public:
  // Returns an id for Unsubscribe. After Fire(), `fn` runs at once, on the caller's thread.
  uint64_t Subscribe(std::function<void()> fn);
  // After it returns, the callback no longer runs.
  void Unsubscribe(uint64_t id);
  // Runs every subscriber once (callbacks must not block). Later subscribers run at once.
  void Fire();
  bool fired() const { return fired_.load(); }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::function<void()>> subscribers_;
  uint64_t next_id_ = 1;
  std::atomic<bool> fired_{false};
};

struct RouterState {
  std::shared_ptr<ModelContext> model;
  std::unique_ptr<ReplicaPool> pool;
  Metrics metrics;
  RouterLimits limits;
  std::atomic<int> in_flight{0};
  std::atomic<int> queued{0};
  std::atomic<uint64_t> next_request{1};
  std::atomic<bool> draining{false};
  ShutdownBroadcast shutdown;  // fired by main() when the drain timeout passes

  // Fills the context fields only the workers know (context length, vocabulary, EOS ids) from
  // a replica's Info. Called by main() before any server starts, so these fields are read-only
  // while requests run. False when no replica has answered yet.
  bool LoadModelInfo();
  // Copies the workers' Load reports into the metrics gauges.
  void RefreshWorkerMetrics();
  // "chatcmpl-<process-unique counter>-<random>" style ids.
  std::string NewId(const char* prefix);
};

// True when the request carries the configured bearer key (or none is configured).
bool Authorized(const RouterLimits& limits, std::string_view authorization_header);

}  // namespace xserv::router
