// xserv-bench: a serving benchmark for any OpenAI-compatible server. Closed loop: for each
// concurrency C in --concurrency, C clients each send streaming /v1/completions requests back to
// back. Open loop (--request-rate): requests arrive as a Poisson process of each given rate,
// whatever the server's pace. Prompts are random token ids of --input-len; exactly --output-len
// tokens are generated (ignore_eos). TTFT, TPOT, ITL and E2E come from the SSE events. Prints a
// table, writes the results as JSON (docs/benchmarks/results schema) and, with --svg, a chart of
// output throughput against TPOT across the sweep.
//
//   xserv-bench --url http://127.0.0.1:8080 --concurrency 1,4,16 --requests 64 \
//               --input-len 128 --output-len 128 [--out results.json] [--hardware TEXT]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/version.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tools/bench/bench_stats.h"
#include "tools/common/http_client.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key, model, out, hardware;
  std::vector<int> concurrency = {1, 4, 16};
  std::vector<double> request_rates;  // non-empty: open loop at these rates (requests/s)
  std::string svg;
  int requests = 64, input_len = 128, output_len = 128, warmup = 2, timeout_s = 600;
  int vocab_low = 100, vocab_high = 10000;  // prompt ids drawn from [low, high)
  uint32_t seed = 0;
};

xserv::tools::RequestTiming OneRequest(const Flags& f, const xserv::tools::HttpEndpoint& e,
                                       std::mt19937& rng) {
  std::uniform_int_distribution<int> id(f.vocab_low, f.vocab_high - 1);
  std::vector<int> prompt(static_cast<size_t>(f.input_len));
  for (int& t : prompt) t = id(rng);
  Json request = {{"prompt", prompt},
                  {"max_tokens", f.output_len},
                  {"ignore_eos", true},
                  {"temperature", 0},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}};
  if (!f.model.empty()) request["model"] = f.model;
  xserv::tools::RequestTiming t;
  xserv::tools::SseReader sse;
  const auto start = Clock::now();
  auto last = start;
  int events = 0;
  bool failed = false;
  auto on_body = [&](int status, std::string_view bytes) {
    if (status != 200) {
      failed = true;
      return false;
    }
    for (const std::string& data : sse.Feed(bytes)) {
      if (data == "[DONE]") return false;
      const Json event = Json::parse(data, nullptr, false);
      if (event.is_discarded() || event.contains("error")) {
        failed = true;
        return false;
      }
      if (event.contains("usage") && event["usage"].is_object()) {
        t.output_tokens = event["usage"].value("completion_tokens", 0);
        t.prompt_tokens = event["usage"].value("prompt_tokens", 0);
      }
      if (!event.contains("choices") || event["choices"].empty()) continue;
      if (event["choices"][0].value("text", "").empty()) continue;
      const auto now = Clock::now();
      if (events++ == 0) {
        t.ttft_s = std::chrono::duration<double>(now - start).count();
      } else {
        t.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  auto response = xserv::tools::PostJsonStreaming(e, "/v1/completions", request.dump(), f.api_key,
                                                  std::chrono::seconds(f.timeout_s), on_body);
  t.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  t.ok = response.ok() && response->status == 200 && !failed && events > 0;
  if (t.ok && t.output_tokens == 0) t.output_tokens = events;  // servers without usage
  return t;
}

Json RunLevel(const Flags& f, const xserv::tools::HttpEndpoint& e, int concurrency) {
  std::vector<xserv::tools::RequestTiming> timings;
  std::mutex mu;
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(f.seed * 7919u + static_cast<uint32_t>(concurrency) * 131u + c);
      while (next.fetch_add(1) < f.requests) {
        xserv::tools::RequestTiming t = OneRequest(f, e, rng);
        std::lock_guard<std::mutex> lock(mu);
        timings.push_back(std::move(t));
        std::fprintf(stderr, "\rconcurrency %d: %zu/%d requests", concurrency, timings.size(),
                     f.requests);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  std::fprintf(stderr, "\n");
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  Json metrics = xserv::tools::Summarize(timings, wall);
  metrics["concurrency"] = concurrency;
  return metrics;
}

// Open loop: arrivals with exponential gaps (mean 1/rate), each request on its own thread.
Json RunRate(const Flags& f, const xserv::tools::HttpEndpoint& e, double rate) {
  std::vector<xserv::tools::RequestTiming> timings(static_cast<size_t>(f.requests));
  std::mt19937 arrivals(f.seed + 17u);
  std::exponential_distribution<double> gap(rate);
  std::vector<std::thread> inflight;
  const auto start = Clock::now();
  auto next = start;
  for (int i = 0; i < f.requests; ++i) {
    std::this_thread::sleep_until(next);
    inflight.emplace_back([&, i] {
      std::mt19937 rng(f.seed * 7919u + static_cast<uint32_t>(i));
      timings[static_cast<size_t>(i)] = OneRequest(f, e, rng);
    });
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(arrivals)));
  }
  for (std::thread& t : inflight) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  Json metrics = xserv::tools::Summarize(timings, wall);
  metrics["request_rate"] = rate;
  return metrics;
}

// Output tok/s (x) against TPOT p50 (y), one labelled point per level, joined in sweep order.
std::string Chart(const Json& levels, const std::string& label_key) {
  constexpr double kW = 640, kH = 400, kPad = 60;
  double max_x = 1e-9, max_y = 1e-9;
  for (const Json& m : levels) {
    max_x = std::max(max_x, m["output_tok_s"].get<double>());
    max_y = std::max(max_y, m["tpot_ms_p50"].get<double>());
  }
  auto px = [&](double x) { return kPad + x / max_x * (kW - 2 * kPad); };
  auto py = [&](double y) { return kH - kPad - y / max_y * (kH - 2 * kPad); };
  std::string points, marks;
  for (const Json& m : levels) {
    const double x = px(m["output_tok_s"].get<double>()), y = py(m["tpot_ms_p50"].get<double>());
    points += absl::StrFormat("%.1f,%.1f ", x, y);
    marks += absl::StrFormat(
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\"/><text x=\"%.1f\" y=\"%.1f\">%s %s</text>\n",
        x, y, x + 6, y - 6, label_key, m[label_key].dump());
  }
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<text x=\"%.0f\" y=\"%.0f\">output tok/s (max %.1f)</text>\n"
      "<text x=\"4\" y=\"%.0f\">TPOT p50 ms (max %.2f)</text>\n"
      "<polyline fill=\"none\" stroke=\"steelblue\" points=\"%s\"/>\n%s</svg>\n",
      kW, kH, kPad, kH - kPad, kW - kPad, kH - kPad, kPad, kPad, kPad, kH - kPad, kW / 2 - 60,
      kH - 20, max_x, kPad - 20, max_y, points, marks);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Closed-loop serving benchmark for an OpenAI-compatible server"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  Flags f;
  app.add_option("--url", f.url, "server base URL")->capture_default_str();
  app.add_option("--concurrency", f.concurrency, "client counts to sweep")->delimiter(',');
  app.add_option("--request-rate", f.request_rates,
                 "open loop: Poisson arrivals at these rates (requests/s) instead of "
                 "--concurrency")
      ->delimiter(',');
  app.add_option("--svg", f.svg, "write a throughput/latency chart of the sweep here");
  app.add_option("--requests", f.requests, "requests per concurrency level")->capture_default_str();
  app.add_option("--input-len", f.input_len, "prompt tokens")->capture_default_str();
  app.add_option("--output-len", f.output_len, "generated tokens")->capture_default_str();
  app.add_option("--warmup", f.warmup, "requests sent before measuring")->capture_default_str();
  app.add_option("--vocab-low", f.vocab_low)->capture_default_str();
  app.add_option("--vocab-high", f.vocab_high)->capture_default_str();
  app.add_option("--seed", f.seed)->capture_default_str();
  app.add_option("--model", f.model, "model name to send");
  app.add_option("--api-key", f.api_key, "bearer key");
  app.add_option("--hardware", f.hardware, "recorded in the results");
  app.add_option("--out", f.out, "write the results JSON here");
  app.add_option("--timeout-s", f.timeout_s, "longest silence of the server")->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-bench")) return *code;
  if (f.requests < 1 || f.input_len < 1 || f.output_len < 1 || f.vocab_low >= f.vocab_high ||
      f.concurrency.empty()) {
    spdlog::error("--requests, --input-len, --output-len must be >= 1 and --vocab-low < --vocab-high");
    return 2;
  }
  auto endpoint = xserv::tools::HttpEndpoint::Parse(f.url);
  if (!endpoint.ok()) {
    spdlog::error("{}", endpoint.status().ToString());
    return 2;
  }
  std::mt19937 warm_rng(f.seed);
  for (int i = 0; i < f.warmup; ++i) {
    if (!OneRequest(f, *endpoint, warm_rng).ok) {
      spdlog::error("warm-up request to {} failed; is the server up?", f.url);
      return 1;
    }
  }
  Json levels = Json::array();
  std::printf("%11s %9s %11s %12s %12s %12s %12s %11s\n",
              f.request_rates.empty() ? "concurrency" : "rate req/s", "completed", "req/s",
              "out tok/s", "ttft p50 ms", "tpot p50 ms", "itl p99 ms", "e2e p99 ms");
  const bool open_loop = !f.request_rates.empty();
  std::vector<double> sweep = f.request_rates;
  if (!open_loop) sweep.assign(f.concurrency.begin(), f.concurrency.end());
  for (double level : sweep) {
    if (open_loop && !(level > 0)) {
      spdlog::error("--request-rate values must be > 0");
      return 2;
    }
    Json m = open_loop ? RunRate(f, *endpoint, level)
                       : RunLevel(f, *endpoint, static_cast<int>(level));
    std::printf("%11.4g %9d %11.2f %12.1f %12.2f %12.2f %12.2f %11.1f\n", level,
                m["completed"].get<int>(), m["request_s"].get<double>(),
                m["output_tok_s"].get<double>(), m["ttft_ms_p50"].get<double>(),
                m["tpot_ms_p50"].get<double>(), m["itl_ms_p99"].get<double>(),
                m["e2e_ms_p99"].get<double>());
    std::fflush(stdout);
    levels.push_back(std::move(m));
  }
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  const Json result = {{"date", date},
                       {"commit", xserv::VersionString()},
                       {"hardware", f.hardware},
                       {"tool", "xserv-bench"},
                       {"server", f.url},
                       {"model", f.model},
                       {"config",
                        {{"input_len", f.input_len},
                         {"output_len", f.output_len},
                         {"requests_per_level", f.requests},
                         {"concurrency", open_loop ? Json::array() : Json(f.concurrency)},
                         {"request_rate", f.request_rates},
                         {"mode", open_loop ? "open-loop-poisson" : "closed-loop"}}},
                       {"metrics", levels}};
  if (!f.out.empty()) {
    std::ofstream(f.out) << result.dump(1) << "\n";
  }
  if (!f.svg.empty()) {
    std::ofstream(f.svg) << Chart(levels, open_loop ? "request_rate" : "concurrency");
  }
  int failed = 0;
  for (const Json& m : levels) failed += m["failed"].get<int>();
  return failed == 0 ? 0 : 1;
}
