#include "tools/bench/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace xserv::tools {

namespace {

double TpotMs(const RequestTiming& t) {
  return t.output_tokens > 1 ? (t.e2e_s - t.ttft_s) * 1e3 / (t.output_tokens - 1) : 0.0;
}

}  // namespace

bool Slo::Met(const RequestTiming& t) const {
  if (!t.ok) return false;
  if (ttft_ms && t.ttft_s * 1e3 > *ttft_ms) return false;
  if (tpot_ms && TpotMs(t) > *tpot_ms) return false;
  return true;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto low = static_cast<size_t>(std::floor(rank));
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (rank - static_cast<double>(low));
}

nlohmann::json Summarize(const std::vector<RequestTiming>& timings, double wall_s,
                         const Slo& slo) {
  std::vector<double> ttft, tpot, itl, e2e;
  int ok = 0, good = 0;
  long output_tokens = 0, prompt_tokens = 0;
  for (const RequestTiming& t : timings) {
    if (!t.ok) continue;
    ++ok;
    if (slo.Met(t)) ++good;
    output_tokens += t.output_tokens;
    prompt_tokens += t.prompt_tokens;
    ttft.push_back(t.ttft_s * 1e3);
    e2e.push_back(t.e2e_s * 1e3);
    if (t.output_tokens > 1) tpot.push_back(TpotMs(t));
    for (double gap : t.itl_s) itl.push_back(gap * 1e3);
  }
  nlohmann::json m = {{"requests", timings.size()},
                      {"completed", ok},
                      {"failed", static_cast<int>(timings.size()) - ok},
                      {"prompt_tokens", prompt_tokens},
                      {"output_tokens", output_tokens},
                      {"duration_s", wall_s},
                      {"request_s", wall_s > 0 ? ok / wall_s : 0.0},
                      {"output_tok_s", wall_s > 0 ? output_tokens / wall_s : 0.0}};
  if (slo.any()) {
    m["good"] = good;
    m["goodput_req_s"] = wall_s > 0 ? good / wall_s : 0.0;
  }
  const std::pair<const char*, const std::vector<double>*> series[] = {
      {"ttft_ms", &ttft}, {"tpot_ms", &tpot}, {"itl_ms", &itl}, {"e2e_ms", &e2e}};
  for (const auto& [name, values] : series) {
    for (int p : {50, 90, 99}) {
      m[std::string(name) + "_p" + std::to_string(p)] = Percentile(*values, p);
    }
  }
  return m;
}

}  // namespace xserv::tools
