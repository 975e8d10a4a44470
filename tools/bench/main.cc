// xserv-bench: a closed-loop serving benchmark for any OpenAI-compatible server. For each
// concurrency C in --concurrency, C clients each send streaming /v1/completions requests back to
// back (random token-id prompts of --input-len, exactly --output-len generated tokens through
// ignore_eos) until --requests have completed; TTFT, TPOT, ITL and E2E are measured from the SSE
// events. Prints a table and writes the results as JSON (docs/benchmarks/results schema).
//
//   xserv-bench --url http://127.0.0.1:8080 --concurrency 1,4,16 --requests 64 \
//               --input-len 128 --output-len 128 [--out results.json] [--hardware TEXT]
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Closed-loop serving benchmark for an OpenAI-compatible server"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  Flags f;
  app.add_option("--url", f.url, "server base URL")->capture_default_str();
  app.add_option("--concurrency", f.concurrency, "client counts to sweep")->delimiter(',');
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
  std::printf("%11s %9s %11s %12s %12s %12s %12s %11s\n", "concurrency", "completed", "req/s",
              "out tok/s", "ttft p50 ms", "tpot p50 ms", "itl p99 ms", "e2e p99 ms");
  for (int c : f.concurrency) {
    Json m = RunLevel(f, *endpoint, c);
    std::printf("%11d %9d %11.2f %12.1f %12.2f %12.2f %12.2f %11.1f\n", c,
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
                         {"concurrency", f.concurrency},
                         {"mode", "closed-loop"}}},
                       {"metrics", levels}};
  if (!f.out.empty()) {
    std::ofstream(f.out) << result.dump(1) << "\n";
  }
  int failed = 0;
  for (const Json& m : levels) failed += m["failed"].get<int>();
  return failed == 0 ? 0 : 1;
}
