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

// Makes `builder` listen on `address` alone: gRPC's default SO_REUSEPORT lets a second server
// bind a port another one already serves, and the kernel then splits connections between the
// two (a peer rank's rendezvous could reach another replica's leader). Without it the second
// bind fails, loudly. `*port` gets the bound port once the server is built (0 on failure).
void ListenExclusively(grpc::ServerBuilder& builder, const std::string& address, int* port);

// Unavailable naming the address when it cannot listen.
absl::StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& host, int port,
                                                  const std::vector<grpc::Service*>& services);

}  // namespace xserv
