// WorkerService: the xserv.worker.v1.Worker gRPC service of one worker process. Generate streams
// go through GenerateStream into the Engine; Abort, Health, Info and Load are answered inline
// (they never block); Rendezvous serves the replica's RendezvousStore.
//
// Owned by main(); the engine (when present) and the store must outlive it. The service starts
// before the model loads (a tensor-parallel leader serves Rendezvous to its peers during start-up)
// and gets the engine through SetEngine once it exists. A peer rank never gets one and refuses
// Generate. Reactions never block except Rendezvous Get, which
// waits on the store up to the call's deadline on a gRPC callback thread.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "worker/engine/engine.h"
#include "worker/service/rendezvous_store.h"
#include "xserv/worker/v1/worker.grpc.pb.h"

namespace xserv::worker {

struct WorkerIdentity {
  std::string model_name;
  std::string config_json;  // config.json verbatim
  std::string backend;      // "cpu" / "cuda"
  std::string dtype;
  xserv::worker::v1::RankLayout layout;
  std::vector<int32_t> eos_token_ids;
  int64_t kv_capacity_blocks = 0;
  int32_t block_size = 16;
  std::string kv_cache_dtype;  // the compute dtype ("f32", "bf16") or "fp8_e4m3"
};

class WorkerService final : public xserv::worker::v1::Worker::CallbackService {
 public:
  WorkerService(engine::Engine* engine, RendezvousStore* store, WorkerIdentity identity)
      : engine_(engine), store_(store), identity_(std::move(identity)) {}

  // The leader's engine, once loaded, with the identity completed by loading (KV capacity, EOS).
  void SetEngine(engine::Engine* engine, WorkerIdentity identity);
  // A peer's identity completed by loading.
  void SetIdentity(WorkerIdentity identity);

  // Health reports SERVING once set; DRAINING after SetDraining. Before that, STARTING with the
  // weight-loading progress set here as its detail.
  void SetServing() { serving_ = true; }
  // > 0: Health reports FAILED while the engine has been in one step longer than this (a hung
  // peer rank or collective), so the supervisor restarts the replica.
  void SetStepTimeout(double seconds) { step_timeout_s_ = seconds; }
  void SetLoadProgress(uint64_t loaded_bytes, uint64_t checkpoint_bytes) {
    loaded_bytes_ = loaded_bytes;
    checkpoint_bytes_ = checkpoint_bytes;
  }
  void SetDraining() { draining_ = true; }

  grpc::ServerWriteReactor<xserv::worker::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const xserv::worker::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const xserv::worker::v1::AbortRequest* request,
                                  xserv::worker::v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const xserv::worker::v1::HealthRequest* request,
                                   xserv::worker::v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* context,
                                 const xserv::worker::v1::InfoRequest* request,
                                 xserv::worker::v1::InfoResponse* response) override;
  grpc::ServerUnaryReactor* Load(grpc::CallbackServerContext* context,
                                 const xserv::worker::v1::LoadRequest* request,
                                 xserv::worker::v1::LoadResponse* response) override;
  grpc::ServerUnaryReactor* Rendezvous(grpc::CallbackServerContext* context,
                                       const xserv::worker::v1::RendezvousRequest* request,
                                       xserv::worker::v1::RendezvousResponse* response) override;

 private:
  WorkerIdentity identity() const;
  bool is_leader() const;

  std::atomic<engine::Engine*> engine_;
  RendezvousStore* store_;
  mutable std::mutex identity_mu_;
  WorkerIdentity identity_;
  std::atomic<bool> serving_{false};
  std::atomic<uint64_t> loaded_bytes_{0}, checkpoint_bytes_{0};
  std::atomic<bool> draining_{false};
  std::atomic<double> step_timeout_s_{0};
};

}  // namespace xserv::worker
