#include "worker/service/worker_service.h"

#include <chrono>

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

}  // namespace

grpc::ServerWriteReactor<wv1::GenerateResponse>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const wv1::GenerateRequest* request) {
  if (engine_ == nullptr) {
    class Refuse final : public grpc::ServerWriteReactor<wv1::GenerateResponse> {
     public:
      Refuse() {
        Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "this rank is not a replica leader; send Generate to the leader"));
      }
      void OnDone() override { delete this; }
    };
    return new Refuse();
  }
  return GenerateStream::Start(*engine_, *request);
}

grpc::ServerUnaryReactor* WorkerService::Abort(grpc::CallbackServerContext* context,
                                               const wv1::AbortRequest* request,
                                               wv1::AbortResponse* response) {
  uint32_t aborted = 0;
  if (engine_ != nullptr) {
    for (const std::string& id : request->request_ids()) aborted += engine_->Abort(id) ? 1 : 0;
  }
  response->set_num_aborted(aborted);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Health(grpc::CallbackServerContext* context,
                                                const wv1::HealthRequest*,
                                                wv1::HealthResponse* response) {
  if (engine_ != nullptr && !engine_->failure().ok()) {
    response->set_state(wv1::HealthResponse::STATE_FAILED);
    response->set_detail(engine_->failure().ToString());
  } else if (draining_) {
    response->set_state(wv1::HealthResponse::STATE_DRAINING);
  } else if (serving_) {
    response->set_state(wv1::HealthResponse::STATE_SERVING);
  } else {
    response->set_state(wv1::HealthResponse::STATE_STARTING);
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Info(grpc::CallbackServerContext* context,
                                              const wv1::InfoRequest*,
                                              wv1::InfoResponse* response) {
  response->set_model_name(identity_.model_name);
  response->set_config_json(identity_.config_json);
  response->set_backend(identity_.backend);
  response->set_dtype(identity_.dtype);
  *response->mutable_layout() = identity_.layout;
  for (int32_t id : identity_.eos_token_ids) response->add_eos_token_ids(static_cast<uint32_t>(id));
  response->set_kv_capacity_blocks(static_cast<uint64_t>(identity_.kv_capacity_blocks));
  response->set_block_size(static_cast<uint32_t>(identity_.block_size));
  response->set_version(VersionString());
  if (engine_ != nullptr) {
    const ModelConfig& config = engine_->model().config();
    response->set_model_type(config.model_type);
    response->set_vocab_size(static_cast<uint32_t>(config.vocab_size));
    response->set_max_context(static_cast<uint32_t>(engine_->max_model_len()));
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WorkerService::Load(grpc::CallbackServerContext* context,
                                              const wv1::LoadRequest*,
                                              wv1::LoadResponse* response) {
  if (engine_ == nullptr) {
    return Done(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                      "this rank is not a replica leader"));
  }
  const engine::EngineLoad load = engine_->Load();
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
    // The call's deadline bounds the wait (at most a minute when the client set none).
    const auto now = std::chrono::system_clock::now();
    const auto remaining = std::min<std::chrono::system_clock::duration>(
        context->deadline() - now, std::chrono::minutes(1));
    auto values = store_->Get(request->epoch(), keys, std::chrono::steady_clock::now() + remaining);
    if (!values.ok()) return Done(context, ToGrpcStatus(values.status()));
    for (std::string& v : *values) response->add_values(std::move(v));
    return Done(context, grpc::Status::OK);
  }
  return Done(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "rendezvous request has neither set nor get"));
}

}  // namespace xserv::worker
