// A small Prometheus registry for the router: counters and histograms with fixed label sets,
// gauges set from the workers' Load reports, rendered as Prometheus text exposition format
// (version 0.0.4) under vLLM-compatible names with the "xserv:" prefix.
//
// Thread-safe: any handler thread records; /metrics renders. One mutex; recording is a few
// additions, far below request costs.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace xserv::router {

class Metrics {
 public:
  Metrics();

  void ObserveTtft(double seconds) { Observe("time_to_first_token_seconds", seconds); }
  void ObserveInterToken(double seconds) { Observe("inter_token_latency_seconds", seconds); }
  void ObserveE2e(double seconds) { Observe("e2e_request_latency_seconds", seconds); }
  void ObserveQueueTime(double seconds) { Observe("request_queue_time_seconds", seconds); }
  void AddPromptTokens(int64_t n) { Add("prompt_tokens_total", "", n); }
  void AddGenerationTokens(int64_t n) { Add("generation_tokens_total", "", n); }
  // finished_reason: stop, length, abort, error
  void CountRequest(const std::string& finished_reason) {
    Add("request_success_total", "finished_reason=\"" + finished_reason + "\"", 1);
  }
  void CountHttp(int status) { Add("http_requests_total", "status=\"" + std::to_string(status) + "\"", 1); }

  // Gauges and worker-side counters, refreshed from the replica pool before rendering.
  struct WorkerTotals {
    double running = 0, waiting = 0, kv_usage = 0;
    double prefix_queries = 0, prefix_hits = 0, preemptions = 0;
    double overlapped_steps = 0;  // pipelined steps started while another was in flight
    double replicas_ready = 0, replicas_total = 0;
    // The replicas' KV cache configuration (from the first one's Info; empty until known).
    std::string cache_dtype;
    int64_t block_size = 0, num_blocks = 0;
  };
  void SetWorkerTotals(const WorkerTotals& totals);

  std::string Render() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative)
    double sum = 0;
    uint64_t count = 0;
  };
  void Observe(const std::string& name, double value);
  void Add(const std::string& name, const std::string& labels, int64_t n);

  mutable std::mutex mu_;
  std::map<std::string, Histogram> histograms_;
  std::map<std::string, std::map<std::string, double>> counters_;  // name -> labels -> value
  WorkerTotals workers_;
};

}  // namespace xserv::router
