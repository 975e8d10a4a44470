// ReplicaPool: the router's view of the worker replicas it may send requests to (one leader
// address per replica). A poller thread probes Health and Load of every replica; Acquire picks a
// ready replica for a prompt by load (router-side in-flight count plus the polled queue and KV
// usage), preferring the replica its prompt prefix hashes to while that one is not much busier,
// so shared prompt prefixes keep hitting the same prefix cache.
//
// Thread-safe: Acquire/Snapshot/Info from any thread; Start/Stop from the owner (main).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::router {

struct ReplicaPoolOptions {
  std::vector<std::string> addresses;
  std::chrono::milliseconds poll_interval{200};
  std::chrono::milliseconds rpc_timeout{1000};
  int failures_to_eject = 2;     // consecutive failed probes before a replica is taken out
  int affinity_slack = 4;        // extra load tolerated to keep prefix affinity
  size_t affinity_tokens = 256;  // prompt tokens hashed for affinity (block-aligned)
};

struct ReplicaState {
  std::string address;
  bool ready = false;  // probed healthy and serving
  int consecutive_failures = 0;
  int in_flight = 0;  // router-side streams currently open
  xserv::worker::v1::LoadResponse load;
  std::string detail;  // last probe error or health detail
};

class ReplicaPool;

// An acquired replica; releasing it (destruction) decrements the in-flight count.
class ReplicaLease {
 public:
  ~ReplicaLease();
  int index() const { return index_; }
  const std::string& address() const { return address_; }
  xserv::worker::v1::Worker::Stub& stub() const { return *stub_; }

 private:
  friend class ReplicaPool;
  ReplicaLease(ReplicaPool* pool, int index, std::string address,
               xserv::worker::v1::Worker::Stub* stub)
      : pool_(pool), index_(index), address_(std::move(address)), stub_(stub) {}
  ReplicaPool* pool_;
  int index_;
  std::string address_;
  xserv::worker::v1::Worker::Stub* stub_;
};

class ReplicaPool {
 public:
  explicit ReplicaPool(ReplicaPoolOptions options);
  ~ReplicaPool();

  void Start();  // first probe round runs synchronously, then the poller thread
  void Stop();

  // A ready replica not in `exclude`, or nullptr when none is ready.
  std::unique_ptr<ReplicaLease> Acquire(std::span<const uint32_t> prompt,
                                        std::span<const int> exclude = {});
  // A stream to `index` failed before producing output: count it as a failed probe so a dead
  // replica is ejected before the next poll.
  void ReportFailure(int index, const std::string& why);

  std::vector<ReplicaState> Snapshot() const;
  bool AnyReady() const;
  size_t size() const { return replicas_.size(); }
  // Info of the first replica that answered it (model, eos ids, context, vocab).
  std::optional<xserv::worker::v1::InfoResponse> Info() const;

  void ProbeAll();  // one synchronous probe round (the poller calls it; tests may too)

 private:
  friend class ReplicaLease;
  struct Replica {
    ReplicaState state;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<xserv::worker::v1::Worker::Stub> stub;
  };
  void Release(int index);
  void Probe(size_t index);

  const ReplicaPoolOptions options_;
  std::vector<Replica> replicas_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::optional<xserv::worker::v1::InfoResponse> info_;
  bool stop_ = false;
  std::thread poller_;
};

}  // namespace xserv::router
