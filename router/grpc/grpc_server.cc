#include "router/grpc/grpc_server.h"

#include "absl/strings/str_cat.h"
#include "common/grpc/server.h"
#include "spdlog/spdlog.h"

namespace xserv::router::grpc_api {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              RouterState& state) {
  std::unique_ptr<GrpcServer> server(new GrpcServer(state));
  const std::string address = absl::StrCat(options.host, ":", options.port);
  grpc::ServerBuilder builder;
  ListenExclusively(builder, address, &server->port_);
  builder.RegisterService(&server->service_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", address));
  }
  server->work_.emplace(boost::asio::make_work_guard(server->io_));
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    server->threads_.emplace_back([s = server.get()] { s->io_.run(); });
  }
  return server;
}

GrpcServer::~GrpcServer() { Stop(); }

void GrpcServer::Stop(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + grace);
  // Calls are done; their coroutines end once the cancelled worker streams close.
  work_.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!io_.stopped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!io_.stopped()) spdlog::warn("gRPC front end: Generate coroutines still running at stop");
  io_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace xserv::router::grpc_api
