// The one mapping between absl::Status and grpc::Status used by every gRPC service and client
// in xserv (codes map one to one; the message is kept).
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace xserv {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace xserv
