// xserv-bench: a serving benchmark for any OpenAI-compatible server (streaming /v1/completions)
// or xserv's public gRPC API (--backend grpc). Closed loop: for each concurrency C in
// --concurrency, C clients send requests back to back. Open loop (--request-rate): requests
// arrive as a Poisson process of each given rate, whatever the server's pace. Prompts are random
// token ids (--dataset random) or cuts of a text file (--dataset text --text-file F); lengths are
// fixed or drawn from [len*(1-R), len*(1+R)] (--random-range-ratio R); with ignore_eos (default),
// the server generates exactly the drawn output length. --warmup requests go first, unmeasured.
// Prints a table (with goodput under --slo-ttft-ms / --slo-tpot-ms), a progress bar on stderr,
// the results as JSON (docs/benchmarks/results schema) and, with --svg, a chart.
//
//   xserv-bench --url http://127.0.0.1:8080 --concurrency 1,4,16 --requests 64
//               --input-len 128 --output-len 128 [--out results.json] [--hardware TEXT]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "common/version.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/bench_target.h"
#include "tools/bench/chart.h"
#include "tools/bench/progress.h"
#include "tools/bench/workload.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using xserv::tools::BenchPrompt;
using xserv::tools::BenchTarget;
using xserv::tools::RequestTiming;

struct Flags {
  std::string backend = "openai";
  std::string url, api_key, model, out, hardware, svg, text_file;
  std::string dataset = "random";
  std::vector<int> concurrency = {1, 4, 16};
  std::vector<double> request_rates;  // non-empty: open loop at these rates (requests/s)
  int requests = 64, warmup = 2, timeout_s = 600;
  bool no_ignore_eos = false;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;  // used when given
  uint32_t seed = 0;
  xserv::tools::WorkloadParams workload;
};

Json RunClosed(BenchTarget& target, const std::vector<BenchPrompt>& prompts, int concurrency,
               const xserv::tools::Slo& slo, bool terminal) {
  std::vector<RequestTiming> timings(prompts.size());
  std::atomic<size_t> next{0};
  xserv::tools::Progress progress("concurrency " + std::to_string(concurrency),
                                  static_cast<int>(prompts.size()), stderr, terminal);
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < prompts.size();) {
        timings[i] = target.Send(prompts[i]);
        progress.Add();
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  progress.Finish();
  Json metrics = xserv::tools::Summarize(timings, wall, slo);
  metrics["concurrency"] = concurrency;
  return metrics;
}

// Open loop: arrivals with exponential gaps (mean 1/rate), each request on its own thread.
Json RunOpen(BenchTarget& target, const std::vector<BenchPrompt>& prompts, double rate,
             uint32_t seed, const xserv::tools::Slo& slo, bool terminal) {
  std::vector<RequestTiming> timings(prompts.size());
  std::mt19937 arrivals(seed);
  std::exponential_distribution<double> gap(rate);
  std::ostringstream label;
  label << "rate " << rate << "/s";
  xserv::tools::Progress progress(label.str(), static_cast<int>(prompts.size()), stderr, terminal);
  std::vector<std::thread> inflight;
  const auto start = Clock::now();
  auto next = start;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::this_thread::sleep_until(next);
    inflight.emplace_back([&, i] {
      timings[i] = target.Send(prompts[i]);
      progress.Add();
    });
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(arrivals)));
  }
  for (std::thread& t : inflight) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  progress.Finish();
  Json metrics = xserv::tools::Summarize(timings, wall, slo);
  metrics["request_rate"] = rate;
  return metrics;
}

// Bytes of text per server token, from tokenizing up to 32 KiB of it; 4 when the server cannot.
double CalibrateCharsPerToken(BenchTarget& target, const std::string& text) {
  size_t n = std::min<size_t>(text.size(), 32 * 1024);
  while (n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  auto count = target.CountTokens(text.substr(0, n));
  if (!count.ok() || *count <= 0) {
    spdlog::warn("cannot count tokens on the server ({}); assuming 4 bytes per token",
                 count.ok() ? "no tokens" : count.status().ToString());
    return 4.0;
  }
  return static_cast<double>(n) / *count;
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--backend", f.backend, "openai (HTTP) or grpc (xserv.v1.Generation)")
      ->check(CLI::IsMember({"openai", "grpc"}))
      ->capture_default_str();
  app.add_option("--url", f.url,
                 "server: http://host:port (openai, default http://127.0.0.1:8080) or "
                 "host:port (grpc, default 127.0.0.1:50051)");
  app.add_option("--concurrency", f.concurrency, "client counts to sweep")->delimiter(',');
  app.add_option("--request-rate", f.request_rates,
                 "open loop: Poisson arrivals at these rates (requests/s) instead of "
                 "--concurrency")
      ->delimiter(',');
  app.add_option("--dataset", f.dataset, "random (token ids) or text (cuts of --text-file)")
      ->check(CLI::IsMember({"random", "text"}))
      ->capture_default_str();
  app.add_option("--text-file", f.text_file, "plain text the text prompts are cut from");
  app.add_option("--svg", f.svg, "write a throughput/latency chart of the sweep here");
  app.add_option("--requests", f.requests, "requests per level")->capture_default_str();
  app.add_option("--input-len", f.workload.input_len, "prompt tokens")->capture_default_str();
  app.add_option("--output-len", f.workload.output_len, "generated tokens")->capture_default_str();
  app.add_option("--random-range-ratio", f.workload.range_ratio,
                 "lengths uniform in [len*(1-R), len*(1+R)]")
      ->capture_default_str();
  app.add_flag("--no-ignore-eos", f.no_ignore_eos,
               "do not send ignore_eos (servers that reject it; outputs may end early)");
  app.add_option("--slo-ttft-ms", f.slo_ttft_ms, "goodput: TTFT objective");
  app.add_option("--slo-tpot-ms", f.slo_tpot_ms, "goodput: TPOT objective");
  app.add_option("--warmup", f.warmup, "requests sent before measuring")->capture_default_str();
  app.add_option("--vocab-low", f.workload.vocab_low)->capture_default_str();
  app.add_option("--vocab-high", f.workload.vocab_high)->capture_default_str();
  app.add_option("--seed", f.seed)->capture_default_str();
  app.add_option("--model", f.model, "model name to send");
  app.add_option("--api-key", f.api_key, "bearer key");
  app.add_option("--hardware", f.hardware, "recorded in the results");
  app.add_option("--out", f.out, "write the results JSON here");
  app.add_option("--timeout-s", f.timeout_s, "longest wait for one request")->capture_default_str();
}

Json ConfigJson(const Flags& f, bool open_loop, const xserv::tools::Slo& slo) {
  Json config = {{"backend", f.backend},
                 {"dataset", f.dataset},
                 {"input_len", f.workload.input_len},
                 {"output_len", f.workload.output_len},
                 {"random_range_ratio", f.workload.range_ratio},
                 {"ignore_eos", !f.no_ignore_eos},
                 {"requests_per_level", f.requests},
                 {"warmup", f.warmup},
                 {"seed", f.seed},
                 {"concurrency", open_loop ? Json::array() : Json(f.concurrency)},
                 {"request_rate", f.request_rates},
                 {"mode", open_loop ? "open-loop-poisson" : "closed-loop"}};
  if (f.workload.dataset == xserv::tools::Dataset::kText) {
    config["text_file"] = f.text_file;
    config["chars_per_token"] = f.workload.chars_per_token;
  }
  if (slo.ttft_ms) config["slo_ttft_ms"] = *slo.ttft_ms;
  if (slo.tpot_ms) config["slo_tpot_ms"] = *slo.tpot_ms;
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Serving benchmark for an OpenAI-compatible server or xserv's gRPC API"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  Flags f;
  AddFlags(app, f);
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-bench")) return *code;
  const bool grpc = f.backend == "grpc";
  if (f.url.empty()) f.url = grpc ? "127.0.0.1:50051" : "http://127.0.0.1:8080";
  f.workload.dataset =
      f.dataset == "text" ? xserv::tools::Dataset::kText : xserv::tools::Dataset::kRandom;
  xserv::tools::Slo slo;
  if (app.count("--slo-ttft-ms")) slo.ttft_ms = f.slo_ttft_ms;
  if (app.count("--slo-tpot-ms")) slo.tpot_ms = f.slo_tpot_ms;
  const bool open_loop = !f.request_rates.empty();
  if (absl::Status s = f.workload.Validate(); !s.ok() || f.requests < 1 || f.warmup < 0 ||
                                              (!open_loop && f.concurrency.empty())) {
    spdlog::error("bad flags: {}",
                  s.ok() ? "--requests must be >= 1, --warmup >= 0" : s.ToString());
    return 2;
  }
  for (double level : open_loop ? f.request_rates : std::vector<double>(
                                                        f.concurrency.begin(), f.concurrency.end())) {
    if (!(level > 0)) {
      spdlog::error("--request-rate and --concurrency values must be > 0");
      return 2;
    }
  }
  const xserv::tools::TargetOptions options{.url = f.url,
                                            .api_key = f.api_key,
                                            .model = f.model,
                                            .ignore_eos = !f.no_ignore_eos,
                                            .timeout = std::chrono::seconds(f.timeout_s)};
  auto target = grpc ? xserv::tools::MakeGrpcTarget(options) : xserv::tools::MakeOpenAiTarget(options);
  if (!target.ok()) {
    spdlog::error("{}", target.status().ToString());
    return 2;
  }
  std::string text;
  if (f.workload.dataset == xserv::tools::Dataset::kText) {
    std::ifstream in(f.text_file, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
    if (!in || text.empty()) {
      spdlog::error("--dataset text needs a readable, non-empty --text-file (got '{}')",
                    f.text_file);
      return 2;
    }
    f.workload.chars_per_token = CalibrateCharsPerToken(**target, text);
  }
  for (const BenchPrompt& p : xserv::tools::MakePrompts(f.workload, text, f.warmup, f.seed ^ 0x5eedu)) {
    if (!(*target)->Send(p).ok) {
      spdlog::error("warm-up request to {} failed; is the server up?", f.url);
      return 1;
    }
  }
  const bool terminal = isatty(STDERR_FILENO);
  std::printf("%11s %9s %11s %12s %12s %12s %12s %11s%s\n",
              open_loop ? "rate req/s" : "concurrency", "completed", "req/s", "out tok/s",
              "ttft p50 ms", "tpot p50 ms", "itl p99 ms", "e2e p99 ms",
              slo.any() ? "  goodput req/s" : "");
  std::vector<double> sweep = f.request_rates;
  if (!open_loop) sweep.assign(f.concurrency.begin(), f.concurrency.end());
  Json levels = Json::array();
  for (size_t li = 0; li < sweep.size(); ++li) {
    // Different prompts per level, so that no level finds the previous one's in a prefix cache.
    const uint32_t seed = f.seed + 1u + static_cast<uint32_t>(li) * 7919u;
    const auto prompts = xserv::tools::MakePrompts(f.workload, text, f.requests, seed);
    Json m = open_loop ? RunOpen(**target, prompts, sweep[li], seed + 17u, slo, terminal)
                       : RunClosed(**target, prompts, static_cast<int>(sweep[li]), slo, terminal);
    std::printf("%11.4g %9d %11.2f %12.1f %12.2f %12.2f %12.2f %11.1f", sweep[li],
                m["completed"].get<int>(), m["request_s"].get<double>(),
                m["output_tok_s"].get<double>(), m["ttft_ms_p50"].get<double>(),
                m["tpot_ms_p50"].get<double>(), m["itl_ms_p99"].get<double>(),
                m["e2e_ms_p99"].get<double>());
    if (slo.any()) std::printf(" %15.2f", m["goodput_req_s"].get<double>());
    std::printf("\n");
    std::fflush(stdout);
    levels.push_back(std::move(m));
  }
  const Json result = {{"date", xserv::UtcTimestamp()},
                       {"commit", xserv::VersionString()},
                       {"hardware", f.hardware},
                       {"tool", "xserv-bench"},
                       {"server", f.url},
                       {"model", f.model},
                       {"config", ConfigJson(f, open_loop, slo)},
                       {"metrics", levels}};
  if (!f.out.empty()) std::ofstream(f.out) << result.dump(1) << "\n";
  if (!f.svg.empty()) {
    std::ofstream(f.svg) << xserv::tools::Chart(levels, open_loop ? "request_rate" : "concurrency");
  }
  int failed = 0;
  for (const Json& m : levels) failed += m["failed"].get<int>();
  return failed == 0 ? 0 : 1;
}
