#include "router/metrics/metrics.h"

#include <algorithm>
#include <sstream>

namespace xserv::router {
namespace {

constexpr const char* kPrefix = "xserv:";

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                        0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                        7.5,   10.0,  20.0, 40.0, 80.0, 160.0};
  return b;
}

}  // namespace

Metrics::Metrics() {
  for (const char* name : {"time_to_first_token_seconds", "inter_token_latency_seconds",
                           "e2e_request_latency_seconds", "request_queue_time_seconds"}) {
    Histogram h;
    h.bounds = LatencyBuckets();
    h.counts.assign(h.bounds.size() + 1, 0);
    histograms_[name] = std::move(h);
  }
  for (const char* name : {"prompt_tokens_total", "generation_tokens_total"})
    counters_[name][""] = 0;
}

void Metrics::Observe(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Histogram& h = histograms_.at(name);
  const size_t bucket =
      std::lower_bound(h.bounds.begin(), h.bounds.end(), value) - h.bounds.begin();
  ++h.counts[bucket];
  h.sum += value;
  ++h.count;
}

void Metrics::Add(const std::string& name, const std::string& labels, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_[name][labels] += static_cast<double>(n);
}

void Metrics::SetWorkerTotals(const WorkerTotals& totals) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_ = totals;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream out;
  auto gauge = [&](const char* name, const char* help, double value) {
    out << "# HELP " << kPrefix << name << " " << help << "\n# TYPE " << kPrefix << name
        << " gauge\n"
        << kPrefix << name << " " << value << "\n";
  };
  gauge("num_requests_running", "Requests running on the workers.", workers_.running);
  gauge("num_requests_waiting", "Requests waiting on the workers.", workers_.waiting);
  gauge("kv_cache_usage_perc", "KV-cache usage, 1 = full (mean over replicas).", workers_.kv_usage);
  gauge("replicas_ready", "Replicas in rotation.", workers_.replicas_ready);
  gauge("replicas_total", "Replicas configured.", workers_.replicas_total);
  if (!workers_.cache_dtype.empty()) {  // an info gauge, as vLLM's cache_config_info
    out << "# HELP " << kPrefix << "cache_config_info KV cache configuration of the replicas.\n"
        << "# TYPE " << kPrefix << "cache_config_info gauge\n"
        << kPrefix << "cache_config_info{block_size=\"" << workers_.block_size
        << "\",cache_dtype=\"" << workers_.cache_dtype << "\",num_gpu_blocks=\""
        << workers_.num_blocks << "\"} 1\n";
  }
  auto counter = [&](const char* name, const char* help, double value) {
    out << "# HELP " << kPrefix << name << " " << help << "\n# TYPE " << kPrefix << name
        << " counter\n"
        << kPrefix << name << " " << value << "\n";
  };
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix caches.",
          workers_.prefix_queries);
  counter("prefix_cache_hits_total", "Prompt tokens found in the prefix caches.",
          workers_.prefix_hits);
  counter("num_preemptions_total", "Preemptions on the workers.", workers_.preemptions);
  counter("pipeline_overlapped_steps_total",
          "Steps a pipeline-parallel leader started while an earlier one was in flight.",
          workers_.overlapped_steps);
  for (const auto& [name, series] : counters_) {
    out << "# TYPE " << kPrefix << name << " counter\n";
    for (const auto& [labels, value] : series) {
      out << kPrefix << name << (labels.empty() ? "" : "{" + labels + "}") << " " << value << "\n";
    }
  }
  for (const auto& [name, h] : histograms_) {
    out << "# TYPE " << kPrefix << name << " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      out << kPrefix << name << "_bucket{le=\"" << h.bounds[i] << "\"} " << cumulative << "\n";
    }
    out << kPrefix << name << "_bucket{le=\"+Inf\"} " << h.count << "\n";
    out << kPrefix << name << "_sum " << h.sum << "\n"
        << kPrefix << name << "_count " << h.count << "\n";
  }
  return out.str();
}

}  // namespace xserv::router
