#include "router/grpc/request_conversion.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace xserv::router::grpc_api {

namespace v1 = xserv::v1;

namespace {

// The HTTP API's bound on logprob alternatives (request.cc kMaxTopLogprobs), applied to the
// public API's prompt_logprobs, which has no OpenAI counterpart to parse it.
constexpr uint32_t kMaxPromptLogprobs = 20;

// The /v1/completions body equivalent to `request` (without prompt_logprobs).
Json CompletionBody(const v1::GenerateRequest& request) {
  Json body = Json::object();
  if (!request.model().empty()) body["model"] = request.model();
  if (request.input_case() == v1::GenerateRequest::kText) {
    body["prompt"] = request.text();
  } else if (request.input_case() == v1::GenerateRequest::kTokenIds) {
    Json ids = Json::array();
    for (uint32_t id : request.token_ids().ids()) ids.push_back(id);
    body["prompt"] = std::move(ids);
  }
  if (request.priority() != 0) body["priority"] = request.priority();
  if (request.has_add_special_tokens()) body["add_special_tokens"] = request.add_special_tokens();
  const v1::SamplingParams& s = request.sampling();
  if (s.has_temperature()) body["temperature"] = static_cast<double>(s.temperature());
  if (s.has_top_p()) body["top_p"] = static_cast<double>(s.top_p());
  if (s.has_top_k()) body["top_k"] = s.top_k();
  if (s.has_min_p()) body["min_p"] = static_cast<double>(s.min_p());
  if (s.has_repetition_penalty()) {
    body["repetition_penalty"] = static_cast<double>(s.repetition_penalty());
  }
  if (s.has_presence_penalty()) {
    body["presence_penalty"] = static_cast<double>(s.presence_penalty());
  }
  if (s.has_frequency_penalty()) {
    body["frequency_penalty"] = static_cast<double>(s.frequency_penalty());
  }
  if (!s.logit_bias().empty()) {
    Json bias = Json::object();
    for (const auto& [id, value] : s.logit_bias()) {
      bias[std::to_string(id)] = static_cast<double>(value);
    }
    body["logit_bias"] = std::move(bias);
  }
  // The parser reads seeds as int64 and casts back to uint64: the bit pattern survives.
  if (s.has_seed()) body["seed"] = static_cast<int64_t>(s.seed());
  if (s.has_max_tokens()) body["max_tokens"] = s.max_tokens();
  if (s.has_min_tokens()) body["min_tokens"] = s.min_tokens();
  if (s.ignore_eos()) body["ignore_eos"] = true;
  if (s.stop_token_ids_size() > 0) {
    body["stop_token_ids"] =
        Json(std::vector<uint32_t>(s.stop_token_ids().begin(), s.stop_token_ids().end()));
  }
  if (s.stop_size() > 0) {
    body["stop"] = Json(std::vector<std::string>(s.stop().begin(), s.stop().end()));
  }
  if (s.include_stop_str_in_output()) body["include_stop_str_in_output"] = true;
  if (s.has_logprobs()) body["logprobs"] = s.logprobs();
  if (s.has_skip_special_tokens()) body["skip_special_tokens"] = s.skip_special_tokens();
  return body;
}

}  // namespace

ApiResult<GenerationRequest> ToGenerationRequest(const v1::GenerateRequest& request) {
  if (request.input_case() == v1::GenerateRequest::INPUT_NOT_SET) {
    return ApiError::Invalid("'text' or 'token_ids' is required", "prompt");
  }
  if (request.input_case() == v1::GenerateRequest::kTokenIds &&
      request.token_ids().ids_size() == 0) {
    return ApiError::Invalid("the prompt is empty", "prompt");
  }
  // What the completions parser would word for HTTP (its echo, its prompt shapes), said here in
  // this API's terms.
  constexpr uint32_t kMaxIds = std::numeric_limits<int32_t>::max();
  const uint32_t max_tokens = request.sampling().max_tokens();
  if (request.sampling().has_max_tokens() && (max_tokens == 0 || max_tokens > kMaxIds)) {
    return ApiError::Invalid(
        absl::StrCat("'max_tokens' must be between 1 and ", kMaxIds, ", got ", max_tokens),
        "max_tokens");
  }
  for (uint32_t id : request.token_ids().ids()) {
    if (id > kMaxIds) {
      return ApiError::Invalid(absl::StrCat("token id ", id, " is outside the vocabulary"),
                               "token_ids");
    }
  }
  auto parsed = ParseCompletionRequest(CompletionBody(request));
  if (auto* r = std::get_if<GenerationRequest>(&parsed)) {
    // The completions default of 16 does not apply: absent means the remaining context.
    if (!request.sampling().has_max_tokens()) r->sampling.max_tokens.reset();
    r->stream = true;
  }
  return parsed;
}

ApiResult<PreparedGeneration> PrepareGenerate(const v1::GenerateRequest& request,
                                              const ModelContext& model) {
  auto parsed = ToGenerationRequest(request);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  auto prepared = Prepare(std::get<GenerationRequest>(parsed), model);
  auto* g = std::get_if<PreparedGeneration>(&prepared);
  if (g == nullptr || !request.sampling().has_prompt_logprobs()) return prepared;
  const uint32_t n = request.sampling().prompt_logprobs();
  if (n > kMaxPromptLogprobs) {
    return ApiError::Invalid(
        absl::StrCat("'prompt_logprobs' must be between 0 and ", kMaxPromptLogprobs, ", got ", n),
        "prompt_logprobs");
  }
  g->sampling.set_prompt_logprobs(n);
  g->prompt_logprobs = true;
  return prepared;
}

absl::Status ApiErrorToStatus(const ApiError& error) {
  switch (error.http_status) {
    case 400:
      return absl::InvalidArgumentError(error.message);
    case 401:
      return absl::UnauthenticatedError(error.message);
    case 403:
      return absl::PermissionDeniedError(error.message);
    case 404:
      return absl::NotFoundError(error.message);
    case 429:
      return absl::ResourceExhaustedError(error.message);
    case 503:
      return absl::UnavailableError(error.message);
    case 504:
      return absl::DeadlineExceededError(error.message);
    default:
      return absl::InternalError(error.message);
  }
}

void AppendLogprobs(const std::vector<xserv::worker::v1::PositionLogprobs>& from,
                    const TokenRenderer& tokens,
                    google::protobuf::RepeatedPtrField<v1::PositionLogprobs>* to) {
  for (const auto& position : from) {
    v1::PositionLogprobs* out = to->Add();
    out->set_token_id(position.token_id());
    out->set_text(tokens.Text(position.token_id()));
    out->set_logprob(position.logprob());
    for (const auto& alternative : position.top()) {
      v1::TokenLogprob* top = out->add_top();
      top->set_token_id(alternative.token_id());
      top->set_text(tokens.Text(alternative.token_id()));
      top->set_logprob(alternative.logprob());
    }
  }
}

v1::FinishReason ToFinishReason(const std::string& reason) {
  if (reason == "stop" || reason == "tool_calls") return v1::FINISH_REASON_STOP;
  if (reason == "length") return v1::FINISH_REASON_LENGTH;
  if (reason == "abort") return v1::FINISH_REASON_ABORT;
  return v1::FINISH_REASON_ERROR;
}

}  // namespace xserv::router::grpc_api
