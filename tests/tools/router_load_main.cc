// xserv-router-load: holds N concurrent SSE chat streams open against xserv-router and reports
// the latency the router adds per request over its worker's own timing. By default it starts
// its own stack on loopback (xserv-fake-worker in echo mode at --token-interval-us, and
// xserv-router on --model, both from this binary's build) so the worker's timing is exactly
// scripted: token i of a request leaves the worker at (i + 1) * interval after it arrived.
// With --router-port it targets a running router instead (its worker must match the flags).
//
// Output: a table, then one JSON line (date, commit, hardware, config, metrics). Exit status 0
// when every stream completed, 1 otherwise.
#include <sys/resource.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "spdlog/spdlog.h"
#include "tests/integration/process.h"
#include "tests/tools/load_report.h"
#include "tests/tools/sse_load_client.h"

namespace xserv::testing {
namespace {

struct Flags {
  std::string model_dir;
  int router_port = 0;
  int streams = 2000;
  int max_tokens = 32;
  int64_t token_interval_us = 20000;
  int router_http_threads = 2;
  std::string prompt = "Hello! Please repeat this sentence back to me.";
  int deadline_s = 300;
  std::string json_out;
};

// Each stream needs a descriptor in this process and one in the router (which inherits the
// limit when this process starts it).
void RaiseFileLimit(int streams) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < static_cast<rlim_t>(streams) + 256) {
    spdlog::warn("RLIMIT_NOFILE is {}: {} streams may not all connect", limit.rlim_cur, streams);
  }
}

int Run(const Flags& f) {
  RaiseFileLimit(f.streams);
  ChildProcess worker, router;
  int port = f.router_port;
  if (port == 0) {
    if (!worker.StartServer("xserv-fake-worker",
                            {"--token-interval-us", std::to_string(f.token_interval_us),
                             "--max-context", "65536", "--log-level", "warn"})) {
      spdlog::error("xserv-fake-worker did not start:\n{}", worker.Log());
      return 2;
    }
    const std::string capacity = std::to_string(std::max(f.streams, 1024));
    if (!router.StartServer("xserv-router",
                            {"--model", f.model_dir, "--workers", worker.address(),
                             "--http-threads", std::to_string(f.router_http_threads),
                             "--max-concurrent-requests", capacity, "--max-queued-requests",
                             capacity, "--log-level", "warn"})) {
      spdlog::error("xserv-router did not start:\n{}", router.Log());
      return 2;
    }
    port = router.port();
  }
  nlohmann::json body = {
      {"messages", nlohmann::json::array({{{"role", "user"}, {"content", f.prompt}}})},
      {"max_tokens", f.max_tokens},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}}};
  const SseLoadOptions options{.port = port,
                               .num_streams = f.streams,
                               .request_body = body.dump(),
                               .deadline = std::chrono::seconds(f.deadline_s)};
  const ProcessUsage before = router.pid() > 0 ? ReadProcessUsage(router.pid()) : ProcessUsage{};
  const SseLoadResult result = RunSseLoad(options);
  ProcessUsage usage = router.pid() > 0 ? ReadProcessUsage(router.pid()) : ProcessUsage{};
  usage.cpu_s -= before.cpu_s;
  const LoadConfig config{.num_streams = f.streams,
                          .max_tokens = f.max_tokens,
                          .token_interval_us = f.token_interval_us,
                          .router_http_threads = f.router_http_threads,
                          .router_address = "127.0.0.1:" + std::to_string(port)};
  const nlohmann::json report = LoadReportJson(config, result, usage);
  std::cout << LoadReportTable(report) << report.dump() << std::endl;
  if (!f.json_out.empty()) std::ofstream(f.json_out) << report.dump() << "\n";
  for (const StreamResult& s : result.streams) {
    if (!s.ok) {
      spdlog::error("first failed stream: {}", s.error);
      break;
    }
  }
  if (router.pid() > 0 && router.Stop(SIGTERM) != 0) spdlog::warn("router exit:\n{}", router.Log());
  if (worker.pid() > 0) worker.Stop(SIGTERM);
  return report["metrics"]["failed"].get<int>() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace xserv::testing

int main(int argc, char** argv) {
  CLI::App app{"xserv-router-load: concurrent SSE streams against xserv-router, latency added"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::testing::Flags f;
  app.add_option("--model", f.model_dir,
                 "model dir for the router it starts (tokenizer.json, tokenizer_config.json, "
                 "config.json suffice)");
  app.add_option("--router-port", f.router_port,
                 "use the router on 127.0.0.1:PORT instead of starting one");
  app.add_option("--streams", f.streams, "concurrent SSE streams")->capture_default_str();
  app.add_option("--max-tokens", f.max_tokens, "tokens per stream")->capture_default_str();
  app.add_option("--token-interval-us", f.token_interval_us, "the fake worker's time per token")
      ->capture_default_str();
  app.add_option("--router-http-threads", f.router_http_threads)->capture_default_str();
  app.add_option("--prompt", f.prompt, "user message (echo mode cycles its token ids)");
  app.add_option("--deadline-s", f.deadline_s, "give up on streams after this")
      ->capture_default_str();
  app.add_option("--json-out", f.json_out, "also write the JSON line here");
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-router-load")) {
    return *code;
  }
  if (f.model_dir.empty() && f.router_port == 0) {
    std::cerr << "--model (to start a stack) or --router-port is required\n";
    return 2;
  }
  return xserv::testing::Run(f);
}
