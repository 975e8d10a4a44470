// KeyValueStore: where the ranks of a replica exchange communicator set-up data (Gloo's per-rank
// TCP addresses). Keys are written once and never deleted; Get waits for a key that another
// rank has not written yet.
//
// Implementations must be thread-safe: several communicators (or, in tests, several ranks of one
// process) may share one store from different threads.
//   InMemoryKeyValueStore       ranks in one process (tests);
//   RendezvousRpcKeyValueStore  the leader's Worker/Rendezvous RPC (rendezvous_rpc_store.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xserv::parallel {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value once `key` exists; DeadlineExceeded if it does not appear within `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
};

class InMemoryKeyValueStore final : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace xserv::parallel
