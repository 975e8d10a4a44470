// PrintBarrierTrace (persistent_trace.h).
#include "kernels/cuda/tools/persistent_trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace xserv::kernels::cuda::bench {
namespace {

// Qwen3-8B's matmuls by shape (persistent_bench_main.cc); the rest are latency phases.
std::string KindOf(const StreamPhase& p) {
  if (p.w == nullptr) return "small op";
  if (p.k == 12288) return "down";
  if (p.n == 24576) return "gate_up";
  return p.n == 6144 ? "qkv" : "o";
}

struct Sums {
  int count = 0;
  double lag_us = 0, propagate_us = 0, wait_us = 0, quantise_us = 0, work_us = 0;
};

}  // namespace

void PrintBarrierTrace(const std::vector<unsigned long long>& trace,
                       const std::vector<StreamPhase>& phases, int ctas, double cycles_per_us) {
  const auto at = [&](size_t phase, int cta, int field) {
    return static_cast<double>(trace[(phase * ctas + cta) * kTraceFields + field]);
  };
  // Barrier i (before phase i) is charged to phase i - 1, the phase it waits for; the
  // quantisation and work after it to phase i.
  std::map<std::string, Sums> by_kind;
  for (size_t i = 1; i + 1 < phases.size(); ++i) {
    // Lag: among the CTAs that had tiles in phase i - 1 (the others arrive at once).
    double first_arrive = 1e300, last_arrive = 0, first_release = 1e300, any_last = 0;
    double wait = 0, quantise = 0, work = 0;
    int quantised = 0, waited = 0;
    for (int c = 0; c < ctas; ++c) {
      any_last = std::max(any_last, at(i, c, kArriveNs));
      first_release = std::min(first_release, at(i, c, kReleaseNs));
      if (at(i - 1, c, kReadyCycles) > 0) {
        first_arrive = std::min(first_arrive, at(i, c, kArriveNs));
        last_arrive = std::max(last_arrive, at(i, c, kArriveNs));
        wait += at(i, c, kReleaseCycles) - at(i, c, kArriveCycles);
        ++waited;
      }
      if (at(i, c, kReadyCycles) > 0) {  // the CTA had tiles in phase i
        ++quantised;
        quantise += at(i, c, kReadyCycles) - at(i, c, kReleaseCycles);
        // Its work in phase i: from x quantised to its arrival at the next barrier.
        work = std::max(work, at(i + 1, c, kArriveNs) - at(i, c, kReadyNs));
      }
    }
    last_arrive = std::max(last_arrive, any_last);
    Sums& s = by_kind[KindOf(phases[i - 1])];
    ++s.count;
    s.lag_us += (last_arrive - first_arrive) / 1e3;
    s.propagate_us += (first_release - last_arrive) / 1e3;
    s.wait_us += waited > 0 ? wait / waited / cycles_per_us : 0;
    Sums& next = by_kind[KindOf(phases[i])];  // phase i's own quantisation and work
    next.quantise_us += quantised > 0 ? quantise / quantised / cycles_per_us : 0;
    next.work_us += work / 1e3;
  }
  // lag, propagate, wait: the barrier after a phase of that kind (means per barrier; lag and wait
  // over the CTAs that had tiles in it); quantise, work: a phase of that kind (means per phase;
  // work: its slowest CTA's).
  std::printf("  %-9s %5s %9s %12s %9s %11s %9s\n", "kind", "count", "lag us", "propagate us",
              "wait us", "quantise us", "work us");
  Sums total;
  for (const auto& [kind, s] : by_kind) {
    const double n = std::max(s.count, 1);
    std::printf("  %-9s %5d %9.2f %12.2f %9.2f %11.2f %13.2f\n", kind.c_str(), s.count,
                s.lag_us / n, s.propagate_us / n, s.wait_us / n, s.quantise_us / n, s.work_us / n);
    total.lag_us += s.lag_us;
    total.propagate_us += s.propagate_us;
    total.wait_us += s.wait_us;
    total.quantise_us += s.quantise_us;
    total.work_us += s.work_us;
  }
  std::printf(
      "  step sums (us): lag %.0f, propagate %.0f, wait %.0f, quantise %.0f, slowest "
      "CTA's work %.0f\n",
      total.lag_us, total.propagate_us, total.wait_us, total.quantise_us, total.work_us);
}

}  // namespace xserv::kernels::cuda::bench
