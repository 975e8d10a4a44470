#include "worker/parallel/rendezvous_rpc_store.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc/status_conversion.h"

namespace xserv::parallel {

namespace wv1 = xserv::worker::v1;

namespace {

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Peers usually start before the leader listens. gRPC's default reconnect backoff (1 s growing to
// 2 min) would then leave a waiting call blind for tens of seconds after the leader is up; retry
// every second at most instead.
grpc::ChannelArguments FastReconnect() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

}  // namespace

RendezvousRpcKeyValueStore::RendezvousRpcKeyValueStore(const std::string& target, uint64_t epoch,
                                                       std::chrono::milliseconds set_timeout)
    : target_(target),
      epoch_(epoch),
      set_timeout_(set_timeout),
      stub_(wv1::Worker::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                                           FastReconnect()))) {
}

absl::Status RendezvousRpcKeyValueStore::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + set_timeout_);
  context.set_wait_for_ready(true);  // the leader may still be starting
  wv1::RendezvousRequest request;
  request.set_epoch(epoch_);
  request.mutable_set()->set_key(key);
  request.mutable_set()->set_value(value);
  wv1::RendezvousResponse response;
  absl::Status status = FromGrpcStatus(stub_->Rendezvous(&context, request, &response));
  if (!status.ok()) {
    return Annotate(status, absl::StrCat("rendezvous Set of '", key, "' at ", target_, " (epoch ",
                                         epoch_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousRpcKeyValueStore::Get(const std::string& key,
                                                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::system_clock::now() + timeout;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    context.set_wait_for_ready(true);
    wv1::RendezvousRequest request;
    request.set_epoch(epoch_);
    request.mutable_get()->add_keys(key);
    wv1::RendezvousResponse response;
    absl::Status status = FromGrpcStatus(stub_->Rendezvous(&context, request, &response));
    if (status.ok()) {
      if (response.values_size() != 1) {
        return absl::InternalError(absl::StrCat("rendezvous Get of '", key, "' at ", target_, ": ",
                                                response.values_size(), " values for 1 key"));
      }
      return std::move(*response.mutable_values(0));
    }
    // The leader bounds one wait to a fraction of a second whatever our deadline (it must not
    // hold its callback threads): ask again until ours passes.
    if (status.code() == absl::StatusCode::kDeadlineExceeded &&
        std::chrono::system_clock::now() < deadline) {
      continue;
    }
    return Annotate(status, absl::StrCat("rendezvous Get of '", key, "' at ", target_, " (epoch ",
                                         epoch_, ")"));
  }
}

}  // namespace xserv::parallel
