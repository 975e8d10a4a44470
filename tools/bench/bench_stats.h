// Latency statistics of a serving benchmark, apart from any I/O: per-request timings in, the
// usual serving metrics out (TTFT, TPOT, ITL, E2E percentiles, throughput), as JSON in the
// schema of docs/benchmarks/results. Pure logic.
#pragma once

#include <vector>

#include "nlohmann/json.hpp"

namespace xserv::tools {

struct RequestTiming {
  bool ok = false;
  double ttft_s = 0;              // request sent -> first generated token
  double e2e_s = 0;               // request sent -> last event
  std::vector<double> itl_s;      // gaps between consecutive token events
  int output_tokens = 0;
  int prompt_tokens = 0;
};

// p in [0, 100]; linear interpolation between order statistics (numpy's default); 0 when empty.
double Percentile(std::vector<double> values, double p);

// Metrics of one run at one concurrency over `wall_s` seconds: counts, request and output-token
// throughput, and p50/p90/p99 of ttft, tpot ((e2e - ttft) / (tokens - 1)), itl and e2e in ms.
nlohmann::json Summarize(const std::vector<RequestTiming>& timings, double wall_s);

}  // namespace xserv::tools
