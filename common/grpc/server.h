// Starting a gRPC server on host:port (port 0: any free one) with insecure credentials, as every
// internal xserv service does, and learning the port it bound.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv {

struct StartedGrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Unavailable naming the address when it cannot listen.
absl::StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& host, int port,
                                                  const std::vector<grpc::Service*>& services);

}  // namespace xserv
