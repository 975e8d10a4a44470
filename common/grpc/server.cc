#include "common/grpc/server.h"

#include "absl/strings/str_cat.h"

namespace xserv {

absl::StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& host, int port,
                                                  const std::vector<grpc::Service*>& services) {
  StartedGrpcServer started;
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(host, ":", port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return started;
}

}  // namespace xserv
