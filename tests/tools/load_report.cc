#include "tests/tools/load_report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/version.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

// Nearest-rank percentile of sorted values; -1 when empty.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return -1;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

json Distribution(std::vector<double> values_s) {
  std::sort(values_s.begin(), values_s.end());
  auto ms = [](double s) { return s < 0 ? -1.0 : std::round(s * 1e5) / 1e2; };
  return json{{"p50_ms", ms(Percentile(values_s, 50))},
              {"p90_ms", ms(Percentile(values_s, 90))},
              {"p99_ms", ms(Percentile(values_s, 99))},
              {"max_ms", ms(values_s.empty() ? -1 : values_s.back())}};
}

}  // namespace

ProcessUsage ReadProcessUsage(int pid) {
  ProcessUsage u;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t close = text.rfind(')');  // the command name may contain spaces
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    // Fields 3.. of stat; utime and stime are fields 14 and 15.
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    u.cpu_s = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) u.peak_rss_kib = std::stoll(line.substr(6));
  }
  return u;
}

json LoadReportJson(const LoadConfig& config, const SseLoadResult& result,
                    const ProcessUsage& router_usage) {
  const double interval_s = static_cast<double>(config.token_interval_us) * 1e-6;
  const double scripted_first_s = interval_s;
  const double scripted_total_s = interval_s * config.max_tokens;
  std::vector<double> first_chunk, first, total, added_first_chunk, added_first, added_total,
      connect;
  int ok = 0;
  int64_t tokens = 0;
  json errors = json::object();
  for (const StreamResult& s : result.streams) {
    connect.push_back(s.connect_s);
    if (!s.ok) {
      const std::string kind = s.error.substr(0, s.error.find(':'));
      errors[kind] = errors.value(kind, 0) + 1;
      continue;
    }
    ++ok;
    tokens += std::max<int64_t>(s.completion_tokens, 0);
    first_chunk.push_back(s.first_chunk_s);
    first.push_back(s.first_content_s);
    total.push_back(s.total_s);
    added_first_chunk.push_back(s.first_chunk_s - scripted_first_s);
    // The worker sent the content's token at (index + 1) * interval at the earliest.
    added_first.push_back(s.first_content_s - interval_s * (s.first_content_chunk_index + 1));
    added_total.push_back(s.total_s - scripted_total_s);
  }
  const BuildInfo& build = GetBuildInfo();
  json report;
  report["date"] = xserv::UtcTimestamp();
  report["commit"] = std::string(build.git_commit) + (build.git_dirty ? "-dirty" : "");
  report["build_type"] = build.build_type;
  report["hardware"] = {{"cpu", xserv::CpuModelName()},
                        {"cores", std::thread::hardware_concurrency()}};
  report["config"] = {{"streams", config.num_streams},
                      {"max_tokens", config.max_tokens},
                      {"token_interval_us", config.token_interval_us},
                      {"router_http_threads", config.router_http_threads},
                      {"router", config.router_address},
                      {"client_threads", 1}};
  json m;
  m["completed"] = ok;
  m["failed"] = config.num_streams - ok;
  m["errors"] = errors;
  m["peak_concurrent_streams"] = result.peak_concurrent_streams;
  m["connect_phase_s"] = std::round(result.connect_phase_s * 1e3) / 1e3;
  m["stream_phase_s"] = std::round(result.stream_phase_s * 1e3) / 1e3;
  m["completion_tokens"] = tokens;
  m["tokens_per_s"] =
      result.stream_phase_s > 0 ? std::round(static_cast<double>(tokens) / result.stream_phase_s) : 0;
  m["scripted_first_token_ms"] = std::round(scripted_first_s * 1e6) / 1e3;
  m["scripted_total_ms"] = std::round(scripted_total_s * 1e6) / 1e3;
  m["first_chunk"] = Distribution(first_chunk);
  m["first_content"] = Distribution(first);
  m["total"] = Distribution(total);
  m["router_added_first_chunk"] = Distribution(added_first_chunk);
  m["router_added_first_content"] = Distribution(added_first);
  m["router_added_total"] = Distribution(added_total);
  m["connect"] = Distribution(connect);
  if (router_usage.cpu_s > 0) {
    m["router_cpu_s"] = std::round(router_usage.cpu_s * 100) / 100;
    m["router_cpu_us_per_token"] =
        tokens > 0 ? std::round(router_usage.cpu_s * 1e6 / static_cast<double>(tokens) * 10) / 10 : 0;
    m["router_peak_rss_mib"] = router_usage.peak_rss_kib / 1024;
  }
  report["metrics"] = m;
  return report;
}

std::string LoadReportTable(const json& report) {
  const json& m = report["metrics"];
  const json& c = report["config"];
  std::string out = absl::StrFormat(
      "router load: %d SSE streams x %d tokens, fake worker %d us/token (scripted: first %.1f ms, "
      "total %.1f ms)\n",
      c["streams"].get<int>(), c["max_tokens"].get<int>(), c["token_interval_us"].get<int64_t>(),
      m["scripted_first_token_ms"].get<double>(), m["scripted_total_ms"].get<double>());
  out += absl::StrFormat("%-34s %10s %10s %10s %10s\n", "latency (ms)", "p50", "p90", "p99", "max");
  for (const char* key : {"first_chunk", "router_added_first_chunk", "first_content",
                          "router_added_first_content", "total",
                          "router_added_total", "connect"}) {
    const json& d = m[key];
    out += absl::StrFormat("%-34s %10.2f %10.2f %10.2f %10.2f\n", key, d["p50_ms"].get<double>(),
                           d["p90_ms"].get<double>(), d["p99_ms"].get<double>(),
                           d["max_ms"].get<double>());
  }
  out += absl::StrFormat(
      "completed %d, failed %d, peak concurrent streams %d, %lld tokens in %.2f s (%.0f tokens/s)\n",
      m["completed"].get<int>(), m["failed"].get<int>(), m["peak_concurrent_streams"].get<int>(),
      static_cast<long long>(m["completion_tokens"].get<int64_t>()), m["stream_phase_s"].get<double>(),
      m["tokens_per_s"].get<double>());
  if (m.contains("router_cpu_s")) {
    out += absl::StrFormat("router: %.2f CPU s (%.1f us per token), peak RSS %d MiB\n",
                           m["router_cpu_s"].get<double>(), m["router_cpu_us_per_token"].get<double>(),
                           m["router_peak_rss_mib"].get<int>());
  }
  if (!m["errors"].empty()) out += "errors: " + m["errors"].dump() + "\n";
  return out;
}

}  // namespace xserv::testing
