#include "common/grpc/server.h"

#include "absl/strings/str_cat.h"

namespace xserv {

void ListenExclusively(grpc::ServerBuilder& builder, const std::string& address, int* port) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
}

absl::StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& host, int port,
                                                  const std::vector<grpc::Service*>& services) {
  StartedGrpcServer started;
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(host, ":", port);
  ListenExclusively(builder, address, &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return started;
}

}  // namespace xserv
