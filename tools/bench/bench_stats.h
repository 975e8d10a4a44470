// Latency statistics of a serving benchmark, apart from any I/O: per-request timings in, the
// usual serving metrics out (TTFT, TPOT, ITL, E2E percentiles, throughput), as JSON in the
// schema of docs/benchmarks/results. Pure logic.
#pragma once

#include <optional>
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

// Service-level objectives of goodput; an unset one is not checked.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;

  bool any() const { return ttft_ms.has_value() || tpot_ms.has_value(); }
  // Whether a completed request meets every set objective (a one-token answer has TPOT 0).
  bool Met(const RequestTiming& t) const;
};

// p in [0, 100]; linear interpolation between order statistics (numpy's default); 0 when empty.
double Percentile(std::vector<double> values, double p);

// Metrics of one run at one concurrency over `wall_s` seconds: counts, request and output-token
// throughput, and p50/p90/p99 of ttft, tpot ((e2e - ttft) / (tokens - 1)), itl and e2e in ms.
// With an SLO set, also "good" (completed requests meeting it) and "goodput_req_s" (per second).
nlohmann::json Summarize(const std::vector<RequestTiming>& timings, double wall_s,
                         const Slo& slo = {});

}  // namespace xserv::tools
