// LoadReport: turns the per-stream results of an SSE load run into the numbers the benchmark
// page records (percentiles of time to first content chunk and total time, the router's share
// of both over the fake worker's scripted timing, throughput, router CPU and memory), printed as
// a table and as one JSON line with date, commit and hardware. Pure functions; no I/O except
// the /proc readers, which say so.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "tests/tools/sse_load_client.h"

namespace xserv::testing {

struct LoadConfig {
  int num_streams = 0;
  int max_tokens = 0;
  int64_t token_interval_us = 0;  // the fake worker's, for the scripted timing
  int router_http_threads = 0;
  std::string router_address;
};

// What the router process used over the run (from /proc/<pid>); zero when unknown.
struct ProcessUsage {
  double cpu_s = 0;        // user + system CPU time
  int64_t peak_rss_kib = 0;  // VmHWM
};

// Reads /proc/<pid>/stat and /proc/<pid>/status.
ProcessUsage ReadProcessUsage(int pid);

// {"date", "commit", "hardware": {"cpu", "cores"}, "config", "metrics"}.
nlohmann::json LoadReportJson(const LoadConfig& config, const SseLoadResult& result,
                              const ProcessUsage& router_usage);

// A human-readable table of the report's metrics.
std::string LoadReportTable(const nlohmann::json& report);

}  // namespace xserv::testing
