// GenerationService: the public xserv.v1.Generation gRPC service of the router. Generate streams
// run as GenerateCall coroutines on the front end's io_context; Tokenize, ModelInfo and Health are
// answered inline on the gRPC thread (they never block). With an API key configured, every RPC but
// Health needs metadata "authorization: Bearer KEY" (else UNAUTHENTICATED).
//
// Owned by GrpcServer; `state` and `io` must outlive it. Stateless itself: any gRPC thread may
// call any method concurrently.
#pragma once

#include <grpcpp/grpcpp.h>

#include "router/http/asio_includes.h"
#include "router/server/router_state.h"
#include "xserv/v1/generation.grpc.pb.h"

namespace xserv::router::grpc_api {

class GenerationService final : public xserv::v1::Generation::CallbackService {
 public:
  GenerationService(RouterState& state, boost::asio::io_context& io) : state_(state), io_(io) {}

  grpc::ServerWriteReactor<xserv::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const xserv::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const xserv::v1::TokenizeRequest* request,
                                     xserv::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const xserv::v1::ModelInfoRequest* request,
                                      xserv::v1::ModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const xserv::v1::HealthRequest* request,
                                   xserv::v1::HealthResponse* response) override;

 private:
  // OK, or Unauthenticated when a key is configured and the call does not carry it.
  absl::Status CheckApiKey(const grpc::CallbackServerContext& context) const;

  RouterState& state_;
  boost::asio::io_context& io_;
};

}  // namespace xserv::router::grpc_api
