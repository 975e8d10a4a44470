#include "worker/service/worker_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "common/grpc/status_conversion.h"
#include "common/version.h"
#include "worker/service/generate_stream.h"

namespace xserv::worker {

namespace wv1 = xserv::worker::v1;

namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

class RefuseGenerate final : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
 public:
  explicit RefuseGenerate(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

void WorkerService::SetEngine(engine::Engine* engine, WorkerIdentity identity) {
  SetIdentity(std::move(identity));
  engine_ = engine;
}

void WorkerService::SetIdentity(WorkerIdentity identity) {
  std::lock_guard<std::mutex> lock(identity_mu_);
  identity_ = std::move(identity);
}

WorkerIdentity WorkerService::identity() const {
  std::lock_guard<std::mutex> lock(identity_mu_);
  return identity_;
}

bool WorkerService::is_leader() const {
  std::lock_guard<std::mutex> lock(identity_mu_);
  // TP rank 0 of the last pipeline stage, where the logits are (see worker/main.cc).
  const auto& l = identity_.layout;
  return l.tp_rank() == 0 && l.pp_rank() + 1 >= std::max<uint32_t>(l.pp_size(), 1);
}

grpc::ServerWriteReactor<wv1::GenerateResponse>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const wv1::GenerateRequest* request) {
  engine::Engine* engine = engine_.load();
  if (engine == nullptr) {
    return new RefuseGenerate(
        is_leader() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is still loading")
                    : grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "this rank is not a replica leader; send Generate to the "
                                   "leader"));
  }
  return GenerateStream::Start(*engine, *request);
}

grpc::ServerUnaryReactor* WorkerService::Abort(grpc::CallbackServerContext* context,
                                               const wv1::AbortRequest* request,
                                               wv1::AbortResponse* response) {
  uint32_t aborted = 0;
  if (engine::Engine* engine = engine_.load(); engine != nullptr) {
    for (const std::string& id : request->request_ids()) aborted += engine->Abort(id) ? 1 : 0;
  }
  response->set_num_aborted(aborted);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Health(grpc::CallbackServerContext* context,
                                                const wv1::HealthRequest*,
                                                wv1::HealthResponse* response) {
  engine::Engine* engine = engine_.load();
  const double step_s = engine != nullptr ? engine->StepRunningSeconds() : 0;
  const double timeout_s = step_timeout_s_;
  if (engine != nullptr && !engine->failure().ok()) {
    response->set_state(wv1::HealthResponse::STATE_FAILED);
    response->set_detail(engine->failure().ToString());
  } else if (timeout_s > 0 && step_s > timeout_s) {
    response->set_state(wv1::HealthResponse::STATE_FAILED);
    response->set_detail(absl::StrFormat(
        "the engine has been in one step for %.1f s (--step-timeout-s %.1f): a peer rank or a "
        "collective is probably hung", step_s, timeout_s));
  } else if (draining_) {
    response->set_state(wv1::HealthResponse::STATE_DRAINING);
  } else if (serving_) {
    response->set_state(wv1::HealthResponse::STATE_SERVING);
  } else {
    response->set_state(wv1::HealthResponse::STATE_STARTING);
    if (const uint64_t total = checkpoint_bytes_; total > 0) {
      response->set_detail(absl::StrFormat("loading weights: %.2f GiB read of a %.2f GiB checkpoint",
                                           loaded_bytes_ / 1073741824.0, total / 1073741824.0));
    }
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Info(grpc::CallbackServerContext* context,
                                              const wv1::InfoRequest*,
                                              wv1::InfoResponse* response) {
  const WorkerIdentity id = identity();
  response->set_model_name(id.model_name);
  response->set_config_json(id.config_json);
  response->set_backend(id.backend);
  response->set_dtype(id.dtype);
  *response->mutable_layout() = id.layout;
  for (int32_t eos : id.eos_token_ids) response->add_eos_token_ids(static_cast<uint32_t>(eos));
  response->set_kv_capacity_blocks(static_cast<uint64_t>(id.kv_capacity_blocks));
  response->set_kv_cache_dtype(id.kv_cache_dtype);
  response->set_block_size(static_cast<uint32_t>(id.block_size));
  response->set_version(VersionString());
  if (engine::Engine* engine = engine_.load(); engine != nullptr) {
    const ModelConfig& config = engine->model().config();
    response->set_model_type(config.model_type);
    response->set_vocab_size(static_cast<uint32_t>(config.vocab_size));
    response->set_max_context(static_cast<uint32_t>(engine->max_model_len()));
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Load(grpc::CallbackServerContext* context,
                                              const wv1::LoadRequest*,
                                              wv1::LoadResponse* response) {
  engine::Engine* engine = engine_.load();
  if (engine == nullptr) {
    return Done(context, is_leader() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                    "the model is still loading")
                                     : grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                                    "this rank is not a replica leader"));
  }
  const engine::EngineLoad load = engine->Load();
  const engine::SchedulerStats& s = load.stats;
  response->set_num_running(static_cast<uint32_t>(s.num_running));
  response->set_num_waiting(static_cast<uint32_t>(s.num_waiting));
  response->set_num_preempted(static_cast<uint32_t>(s.num_swapped));
  const double total = static_cast<double>(s.blocks.num_device_blocks);
  response->set_kv_blocks_total(static_cast<uint64_t>(s.blocks.num_device_blocks));
  response->set_kv_blocks_free(static_cast<uint64_t>(s.blocks.num_free_device_blocks));
  response->set_kv_usage(total > 0 ? static_cast<float>(1.0 - s.blocks.num_free_device_blocks / total)
                                   : 0.0f);
  response->set_prefix_cache_queries(s.blocks.prefix_query_tokens);
  response->set_prefix_cache_hits(s.blocks.prefix_hit_tokens);
  response->set_prompt_tokens_total(s.num_prompt_tokens_total);
  response->set_generation_tokens_total(s.num_generation_tokens_total);
  response->set_num_preemptions_total(s.num_preemptions_total);
  response->set_num_overlapped_steps_total(s.num_overlapped_steps_total);
  response->set_step_time_ms_avg(load.step_time_ms_avg);
  response->set_draining(load.draining || draining_);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Rendezvous(grpc::CallbackServerContext* context,
                                                    const wv1::RendezvousRequest* request,
                                                    wv1::RendezvousResponse* response) {
  if (store_ == nullptr) {
    return Done(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                      "this rank serves no rendezvous store"));
  }
  if (request->has_set()) {
    return Done(context, ToGrpcStatus(store_->Set(request->epoch(), request->set().key(),
                                                  request->set().value())));
  }
  if (request->has_get()) {
    const std::vector<std::string> keys(request->get().keys().begin(),
                                        request->get().keys().end());
    // The wait runs on one of gRPC's few callback threads: hold it briefly (the client asks
    // again until its own deadline) so that waiting peers can never starve the Set calls that
    // would satisfy them.
    const auto now = std::chrono::system_clock::now();
    const auto remaining = std::min<std::chrono::system_clock::duration>(
        context->deadline() - now, std::chrono::milliseconds(200));
    auto values = store_->Get(request->epoch(), keys, std::chrono::steady_clock::now() + remaining);
    if (!values.ok()) return Done(context, ToGrpcStatus(values.status()));
    for (std::string& v : *values) response->add_values(std::move(v));
    return Done(context, grpc::Status::OK);
  }
  return Done(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "rendezvous request has neither set nor get"));
}

}  // namespace xserv::worker
