// xserv-router: the OpenAI-compatible HTTP front end and the public gRPC API (xserv.v1.Generation)
// over one or more worker replicas. Stateless: restarting it loses only its in-flight requests.
//
// Start-up: load the tokenizer and chat template from --model, probe the replicas until one
// answers Info (context length, vocabulary), then serve HTTP and gRPC. SIGTERM/SIGINT: refuse new
// requests (503), let in-flight ones finish within --drain-timeout-s, end those still running
// with an error (about 2 s more), stop, exit 0. The supervisor's --grace-period-s covers this.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flags.h"
#include "common/shutdown_signals.h"
#include "router/grpc/grpc_server.h"
#include "router/http/http_server.h"
#include "router/openai/api_error.h"
#include "router/server/openai_handlers.h"
#include "router/server/router_state.h"
#include "spdlog/spdlog.h"

namespace xserv::router {
namespace {

struct RouterFlags {
  std::string model_dir;
  std::string served_model_name;
  std::string workers;
  std::string host = "127.0.0.1";
  int http_port = 8080;
  int grpc_port = 50051;
  std::string port_file;
  std::string grpc_port_file;
  int http_threads = 2;
  int grpc_threads = 2;
  double drain_timeout_s = 30;
  double request_timeout_s = 1800;
  RouterLimits limits;
};

// Written atomically (rename), so a reader never sees a partial number.
void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  std::ofstream(path + ".tmp") << port << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

// "host:port" (a name, an IPv4 address or a bracketed IPv6 one) with a port in 1..65535, or a
// gRPC target with a scheme ("dns:///host:port", "ipv4:10.0.0.1:50100", "unix:/path"): anything
// else would only make the router wait for a replica that can never answer.
bool IsWorkerAddress(const std::string& address) {
  for (const char* scheme : {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:"}) {
    if (absl::StartsWith(address, scheme) && address.size() > strlen(scheme)) return true;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string host = address.substr(0, colon);
  if (host.find(':') != std::string::npos && !(host.front() == '[' && host.back() == ']')) {
    return false;  // an IPv6 address needs brackets, or the port is ambiguous
  }
  int port = 0;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 1 && port <= 65535;
}

int Run(RouterFlags& f) {
  RouterState state;
  auto model = ModelContext::Load(f.model_dir, f.served_model_name);
  if (!model.ok()) {
    spdlog::error("loading {}: {}", f.model_dir, model.status().ToString());
    return 1;
  }
  state.model = *model;
  f.limits.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(f.request_timeout_s * 1000));
  state.limits = f.limits;
  ReplicaPoolOptions pool_options;
  for (absl::string_view w : absl::StrSplit(f.workers, ',', absl::SkipWhitespace())) {
    const std::string address(absl::StripAsciiWhitespace(w));
    if (!IsWorkerAddress(address)) {
      spdlog::error("--workers: '{}' is not a replica leader address (host:port)", address);
      return 2;
    }
    pool_options.addresses.push_back(address);
  }
  if (pool_options.addresses.empty()) {
    spdlog::error("--workers lists no replica");
    return 2;
  }
  state.pool = std::make_unique<ReplicaPool>(pool_options);
  state.pool->Start();
  while (!state.LoadModelInfo()) {
    spdlog::info("waiting for a worker replica to answer Info ({})", f.workers);
    if (WaitForShutdownSignal(std::chrono::milliseconds(500)) != 0) return 0;
    state.pool->ProbeAll();
  }
  spdlog::info("model '{}' ({}): context {}, vocab {}, {} replica(s)", state.model->served_name,
               state.model->model_type, state.model->max_context, state.model->vocab_size,
               pool_options.addresses.size());

  http::HttpServerOptions options;
  options.host = f.host;
  options.port = f.http_port;
  options.threads = f.http_threads;
  options.on_response = [&state](int status) { state.metrics.CountHttp(status); };
  options.error_body = [](int status, std::string_view message) {
    ApiError e;
    e.http_status = status;
    e.message = std::string(message);
    e.type = status >= 500 ? "server_error" : "invalid_request_error";
    return http::HttpErrorBody{.content_type = "application/json", .body = e.ToJson()};
  };
  auto server = http::HttpServer::Start(options, MakeOpenAiHandler(state));
  if (!server.ok()) {
    spdlog::error("HTTP server: {}", server.status().ToString());
    return 1;
  }
  grpc_api::GrpcServerOptions grpc_options{
      .host = f.host, .port = f.grpc_port, .threads = f.grpc_threads};
  auto grpc_server = grpc_api::GrpcServer::Start(grpc_options, state);
  if (!grpc_server.ok()) {
    spdlog::error("gRPC server: {}", grpc_server.status().ToString());
    (*server)->Stop();
    return 1;
  }
  // The gRPC port file first: whoever waits for the HTTP port file finds both.
  WritePortFile(f.grpc_port_file, (*grpc_server)->port());
  WritePortFile(f.port_file, (*server)->port());
  spdlog::info("serving OpenAI HTTP on {}:{}, gRPC xserv.v1.Generation on {}:{}", f.host,
               (*server)->port(), f.host, (*grpc_server)->port());
  while (WaitForShutdownSignal(std::chrono::seconds(1)) == 0) {
  }
  spdlog::info("draining: refusing new requests, {} in flight", state.in_flight.load());
  state.draining = true;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.drain_timeout_s * 1000));
  auto wait_for_requests = [&state](std::chrono::steady_clock::time_point until) {
    while ((state.in_flight > 0 || state.queued > 0) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  wait_for_requests(deadline);
  if (state.in_flight > 0 || state.queued > 0) {
    // Requests still running get an error (SSE error event and [DONE], 503, gRPC UNAVAILABLE)
    // rather than a connection cut by the servers' Stop.
    spdlog::warn("drain timeout: ending {} request(s) in flight and {} queued with an error",
                 state.in_flight.load(), state.queued.load());
    state.shutdown.Fire();
    wait_for_requests(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }
  (*grpc_server)->Stop();
  (*server)->Stop();
  state.pool->Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace xserv::router

int main(int argc, char** argv) {
  xserv::BlockShutdownSignals();

  CLI::App app{
      "xserv-router: OpenAI-compatible HTTP and public gRPC front end over xserv worker "
      "replicas"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::router::RouterFlags f;
  app.add_option("--model", f.model_dir, "model directory (tokenizer, chat template)")->required();
  app.add_option("--served-model-name", f.served_model_name, "default: the directory name");
  app.add_option("--workers", f.workers, "comma-separated replica leader addresses host:port")
      ->required();
  app.add_option("--host", f.host)->capture_default_str();
  app.add_option("--http-port", f.http_port, "0: any free port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--port", f.http_port, "alias of --http-port")->check(CLI::Range(0, 65535));
  app.add_option("--grpc-port", f.grpc_port, "public gRPC port (xserv.v1.Generation); 0: any free")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--port-file", f.port_file, "write the bound HTTP port here once serving");
  app.add_option("--grpc-port-file", f.grpc_port_file,
                 "write the bound gRPC port here once serving");
  app.add_option("--grpc-threads", f.grpc_threads, "threads running gRPC Generate streams")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--http-threads", f.http_threads)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--api-key", f.limits.api_key, "require 'Authorization: Bearer KEY'")
      ->envname("XSERV_API_KEY");
  app.add_option("--max-concurrent-requests", f.limits.max_in_flight)
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--max-queued-requests", f.limits.max_queued)
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--request-timeout-s", f.request_timeout_s)
      ->check(xserv::NumberIn(0.001, 1e7))
      ->capture_default_str();
  app.add_option("--drain-timeout-s", f.drain_timeout_s)
      ->check(xserv::NumberIn(0, 1e7))
      ->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-router")) return *code;
  return xserv::router::Run(f);
}
