// GrpcServer: the router's public gRPC front end: a grpc::Server serving xserv.v1.Generation, and
// the small Asio io_context (own threads) on which Generate calls run their GenerationRun
// coroutines, one strand per call, as HTTP handlers do on the HTTP server's io_context.
//
// Owned by main(); `state` must outlive it. Start() and Stop() from the owning thread only;
// port() from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "router/grpc/generation_service.h"
#include "router/http/asio_includes.h"
#include "router/server/router_state.h"

namespace xserv::router::grpc_api {

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 50051;  // 0: any free port
  int threads = 2;   // io_context threads running Generate coroutines
};

class GrpcServer {
 public:
  // Listens and serves; an error when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           RouterState& state);
  ~GrpcServer();  // Stop()

  int port() const { return port_; }

  // Refuses new calls, cancels those still open after `grace`, waits for their coroutines to
  // end (bounded), then stops the io_context threads. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(1));

 private:
  explicit GrpcServer(RouterState& state) : service_(state, io_) {}

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  GenerationService service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace xserv::router::grpc_api
