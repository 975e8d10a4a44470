// RendezvousRpcKeyValueStore: a KeyValueStore backed by the replica leader's
// xserv.worker.v1.Worker/Rendezvous RPC (served from worker/service/rendezvous_store.h), so the
// ranks of a replica can meet without a shared filesystem. Every call carries the replica epoch;
// the leader refuses another epoch with FailedPrecondition, so a rank of an older incarnation
// never reads the new one's keys.
//
// Thread-safe (a gRPC stub is). Calls wait for the leader to come up (wait_for_ready) instead of
// failing while it is still starting, bounded by the call's timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "worker/parallel/kv_store.h"
#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::parallel {

class RendezvousRpcKeyValueStore final : public KeyValueStore {
 public:
  // `target` is the leader's "host:port". `set_timeout` bounds each Set (including waiting for
  // the leader to start listening).
  RendezvousRpcKeyValueStore(const std::string& target, uint64_t epoch,
                             std::chrono::milliseconds set_timeout = std::chrono::seconds(30));

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;

 private:
  const std::string target_;
  const uint64_t epoch_;
  const std::chrono::milliseconds set_timeout_;
  std::unique_ptr<xserv::worker::v1::Worker::Stub> stub_;
};

}  // namespace xserv::parallel
