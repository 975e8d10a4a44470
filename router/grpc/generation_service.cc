#include "router/grpc/generation_service.h"

#include <string>
#include <string_view>

#include "common/grpc/status_conversion.h"
#include "router/grpc/generate_call.h"
#include "router/openai/prepare.h"

namespace xserv::router::grpc_api {

namespace v1 = xserv::v1;

namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::Status GenerationService::CheckApiKey(const grpc::CallbackServerContext& context) const {
  std::string_view header;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    header = std::string_view(it->second.data(), it->second.size());
  }
  if (Authorized(state_.limits, header)) return absl::OkStatus();
  return absl::UnauthenticatedError(
      "missing or invalid API key (send metadata 'authorization: Bearer <key>')");
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return GenerateCall::Start(state_, io_, *request, CheckApiKey(*context));
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const v1::TokenizeRequest* request,
                                                      v1::TokenizeResponse* response) {
  if (absl::Status auth = CheckApiKey(*context); !auth.ok()) return Done(context, auth);
  const ModelContext& model = *state_.model;
  for (uint32_t id : EncodeText(model, request->text(), request->add_special_tokens())) {
    response->add_ids(id);
  }
  response->set_max_context(static_cast<uint32_t>(model.max_context));
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationService::ModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::ModelInfoRequest*,
                                                       v1::ModelInfoResponse* response) {
  if (absl::Status auth = CheckApiKey(*context); !auth.ok()) return Done(context, auth);
  const ModelContext& model = *state_.model;
  response->set_model(model.served_name);
  response->set_model_type(model.model_type);
  response->set_max_context(static_cast<uint32_t>(model.max_context));
  response->set_vocab_size(static_cast<uint32_t>(model.vocab_size));
  uint32_t ready = 0;
  const std::vector<ReplicaState> replicas = state_.pool->Snapshot();
  for (const ReplicaState& r : replicas) ready += r.ready ? 1 : 0;
  response->set_num_replicas(static_cast<uint32_t>(replicas.size()));
  response->set_num_replicas_ready(ready);
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationService::Health(grpc::CallbackServerContext* context,
                                                    const v1::HealthRequest*,
                                                    v1::HealthResponse* response) {
  const bool any_ready = state_.pool->AnyReady();
  response->set_ready(any_ready && !state_.draining);
  if (state_.draining) {
    response->set_detail("the router is draining");
  } else if (!any_ready) {
    response->set_detail("no worker replica is ready");
  }
  return Done(context, absl::OkStatus());
}

}  // namespace xserv::router::grpc_api
