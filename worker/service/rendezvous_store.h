// RendezvousStore: the small key-value store a replica leader serves through the Rendezvous RPC
// so its peers can exchange communicator set-up data (NCCL unique id, Gloo store keys) without
// a shared filesystem. Keys are scoped by an epoch (the replica incarnation): a restarted
// replica starts a new epoch and never sees stale values.
//
// Thread-safe: Set and Get may be called concurrently from gRPC handler threads; Get blocks
// until every key exists, the deadline passes or Shutdown() is called.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::worker {

class RendezvousStore {
 public:
  explicit RendezvousStore(uint64_t epoch) : epoch_(epoch) {}

  uint64_t epoch() const { return epoch_; }

  // FailedPrecondition for another epoch; InvalidArgument for an empty key.
  absl::Status Set(uint64_t epoch, const std::string& key, std::string value);
  // Values in key order; DeadlineExceeded naming the missing keys; Cancelled after Shutdown.
  absl::StatusOr<std::vector<std::string>> Get(uint64_t epoch, const std::vector<std::string>& keys,
                                               std::chrono::steady_clock::time_point deadline);
  void Shutdown();

 private:
  absl::Status CheckEpoch(uint64_t epoch) const;

  const uint64_t epoch_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  bool shutdown_ = false;
};

}  // namespace xserv::worker
