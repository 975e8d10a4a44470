// FakeWorkerService: a model-free xserv.worker.v1.Worker for router tests and load runs. Generate
// streams scripted token ids instead of running a model:
//   - script mode (options.script_ids non-empty): the same ids for every request, truncated to
//     max_tokens when that is smaller; then Finished STOP (stop_token_id = the last id) when the
//     last id is an EOS id, else LENGTH;
//   - echo mode (no script): max_tokens ids (default_max_tokens when the request has none), the
//     prompt ids cycled; then Finished LENGTH.
// Token i (0-based) of a request is written at arrival + (i + 1) * token_interval (an absolute
// schedule, so slow writes do not accumulate), or as fast as the client reads when the interval is
// zero. One token per message. A cancelled call stops at once and ends with CANCELLED, as the real
// worker does. Health is SERVING (DRAINING after SetDraining), Info reports the configured model
// facts, Load the number of running streams. Abort and Rendezvous are not implemented.
//
// Ownership and threading: owned by main(), outlives the gRPC server. Reactions run on gRPC
// callback threads and never block; each Generate call is one reactor that deletes itself in
// OnDone. Options are fixed at construction.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::testing {

struct FakeWorkerOptions {
  std::string model_name = "fake";
  std::string model_type = "qwen3";  // what Info reports (the router reads its own config.json)
  uint32_t vocab_size = 151936;
  uint32_t max_context = 40960;
  std::vector<uint32_t> eos_token_ids = {};
  std::vector<uint32_t> script_ids = {};  // empty: echo mode
  uint32_t default_max_tokens = 16;       // echo mode, when the request sets no max_tokens
  std::chrono::microseconds token_interval{0};

  absl::Status Validate() const;
};

class FakeWorkerService final : public xserv::worker::v1::Worker::CallbackService {
 public:
  explicit FakeWorkerService(FakeWorkerOptions options) : options_(std::move(options)) {}

  void SetDraining() { draining_ = true; }
  int num_running() const { return num_running_.load(); }

  grpc::ServerWriteReactor<xserv::worker::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const xserv::worker::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const xserv::worker::v1::HealthRequest* request,
                                   xserv::worker::v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* context,
                                 const xserv::worker::v1::InfoRequest* request,
                                 xserv::worker::v1::InfoResponse* response) override;
  grpc::ServerUnaryReactor* Load(grpc::CallbackServerContext* context,
                                 const xserv::worker::v1::LoadRequest* request,
                                 xserv::worker::v1::LoadResponse* response) override;

 private:
  class GenerateReactor;

  const FakeWorkerOptions options_;
  std::atomic<bool> draining_{false};
  std::atomic<int> num_running_{0};
  std::atomic<uint64_t> generated_total_{0};
  std::atomic<uint64_t> prompt_total_{0};
};

}  // namespace xserv::testing
