// xserv-fake-worker: serves xserv.worker.v1.Worker without a model (see fake_worker.h): scripted
// token ids (--script-ids) or the prompt echoed for max_tokens ids at --token-interval-us. For
// router tests (reasoning split, hostile clients) and router load runs (xserv-router-load).
//
// Lifecycle as xserv-worker: bind, write --port-file, report SERVING; SIGTERM/SIGINT: report
// DRAINING, stop the server (in-flight streams get two seconds), exit 0.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/grpc/server.h"
#include "common/shutdown_signals.h"
#include "spdlog/spdlog.h"
#include "tests/tools/fake_worker.h"

namespace xserv::testing {
namespace {

struct Flags {
  std::string host = "127.0.0.1";
  int port = 50061;
  std::string port_file;
  std::string script_ids;
  std::string eos_ids;
  int64_t token_interval_us = 0;
  FakeWorkerOptions options;
};

absl::StatusOr<std::vector<uint32_t>> ParseIds(const std::string& text, const char* flag) {
  std::vector<uint32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(std::string(flag) + ": '" + std::string(part) +
                                        "' is not a token id");
    }
    ids.push_back(id);
  }
  return ids;
}

int Run(Flags& f) {
  auto script = ParseIds(f.script_ids, "--script-ids");
  auto eos = ParseIds(f.eos_ids, "--eos-ids");
  for (const absl::Status& status : {script.status(), eos.status()}) {
    if (!status.ok()) {
      spdlog::error("{}", status.ToString());
      return 2;
    }
  }
  f.options.script_ids = std::move(*script);
  f.options.eos_token_ids = std::move(*eos);
  f.options.token_interval = std::chrono::microseconds(f.token_interval_us);
  if (auto status = f.options.Validate(); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 2;
  }
  FakeWorkerService service(f.options);
  auto started = xserv::StartGrpcServer(f.host, f.port, {&service});
  if (!started.ok()) {
    spdlog::error("{}", started.status().ToString());
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  const int bound_port = started->port;
  if (!f.port_file.empty()) {
    std::ofstream(f.port_file + ".tmp") << bound_port << "\n";
    std::filesystem::rename(f.port_file + ".tmp", f.port_file);
  }
  spdlog::info("fake worker ({} mode, {} us/token) serving on {}:{}",
               f.options.script_ids.empty() ? "echo" : "script", f.token_interval_us, f.host,
               bound_port);
  while (WaitForShutdownSignal(std::chrono::seconds(1)) == 0) {
  }
  service.SetDraining();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace xserv::testing

int main(int argc, char** argv) {
  xserv::BlockShutdownSignals();

  CLI::App app{"xserv-fake-worker: a model-free Worker that streams scripted token ids"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::testing::Flags f;
  app.add_option("--host", f.host, "listen address")->capture_default_str();
  app.add_option("--port", f.port, "listen port (0: any free port)")->capture_default_str();
  app.add_option("--port-file", f.port_file, "write the bound port here once serving");
  app.add_option("--model-name", f.options.model_name)->capture_default_str();
  app.add_option("--model-type", f.options.model_type, "Info's model_type")->capture_default_str();
  app.add_option("--vocab-size", f.options.vocab_size)->capture_default_str();
  app.add_option("--max-context", f.options.max_context)->capture_default_str();
  app.add_option("--eos-ids", f.eos_ids, "comma-separated EOS token ids");
  app.add_option("--script-ids", f.script_ids,
                 "comma-separated ids streamed for every request (default: echo the prompt)");
  app.add_option("--default-max-tokens", f.options.default_max_tokens,
                 "echo mode: ids per request when it sets no max_tokens")
      ->capture_default_str();
  app.add_option("--token-interval-us", f.token_interval_us,
                 "time between tokens of one request (0: as fast as the client reads)")
      ->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-fake-worker")) {
    return *code;
  }
  return xserv::testing::Run(f);
}
