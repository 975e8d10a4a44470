#include "worker/service/conversions.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace xserv::worker {
namespace {

namespace wv1 = xserv::worker::v1;

absl::StatusOr<int32_t> TokenId(uint32_t id, const char* what) {
  if (id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", id, " is out of range"));
  }
  return static_cast<int32_t>(id);
}

void ToProto(const sampling::PositionLogprobs& in, wv1::PositionLogprobs& out) {
  out.set_token_id(static_cast<uint32_t>(in.token));
  out.set_logprob(in.logprob);
  out.set_rank(static_cast<uint32_t>(in.rank));
  for (const sampling::TokenLogprob& t : in.top) {
    wv1::TokenLogprob* alt = out.add_top();
    alt->set_token_id(static_cast<uint32_t>(t.token));
    alt->set_logprob(t.logprob);
  }
}

wv1::FinishReason ToProto(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop: return wv1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength: return wv1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kAbort: return wv1::FINISH_REASON_ABORT;
    case engine::FinishReason::kError: return wv1::FINISH_REASON_ERROR;
  }
  return wv1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<engine::GenerateParams> ToGenerateParams(const wv1::GenerateRequest& request) {
  engine::GenerateParams p;
  p.request_id = request.request_id();
  p.priority = request.priority();
  for (uint32_t id : request.prompt_token_ids()) {
    auto token = TokenId(id, "prompt token");
    if (!token.ok()) return token.status();
    p.prompt.push_back(*token);
  }
  const wv1::SamplingParams& s = request.sampling();
  sampling::SamplingParams& out = p.sampling;
  if (s.has_temperature()) out.temperature = s.temperature();
  if (s.has_top_p()) out.top_p = s.top_p();
  if (s.has_top_k()) out.top_k = s.top_k();
  if (s.has_min_p()) out.min_p = s.min_p();
  if (s.has_repetition_penalty()) out.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out.frequency_penalty = s.frequency_penalty();
  for (const auto& [id, bias] : s.logit_bias()) {
    auto token = TokenId(id, "logit_bias token");
    if (!token.ok()) return token.status();
    out.logit_bias.emplace_back(*token, bias);
  }
  if (s.has_seed()) out.seed = s.seed();
  if (s.has_logprobs()) {
    if (s.logprobs() > static_cast<uint32_t>(sampling::kMaxLogprobs)) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs must be at most ",
                                                     sampling::kMaxLogprobs));
    }
    out.logprobs = static_cast<int32_t>(s.logprobs());
  }
  if (s.has_prompt_logprobs()) {
    if (s.prompt_logprobs() > static_cast<uint32_t>(sampling::kMaxLogprobs)) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_logprobs must be at most ",
                                                     sampling::kMaxLogprobs));
    }
    out.prompt_logprobs = static_cast<int32_t>(s.prompt_logprobs());
  }
  if (s.has_max_tokens()) {
    if (s.max_tokens() > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError("max_tokens is out of range");
    }
    p.max_tokens = static_cast<int32_t>(s.max_tokens());
  }
  if (s.has_min_tokens()) {
    if (s.min_tokens() > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError("min_tokens is out of range");
    }
    p.min_tokens = static_cast<int32_t>(s.min_tokens());
  }
  p.ignore_eos = s.ignore_eos();
  for (uint32_t id : s.stop_token_ids()) {
    auto token = TokenId(id, "stop token id");
    if (!token.ok()) return token.status();
    p.stop_token_ids.push_back(*token);
  }
  return p;
}

void AppendTokens(const std::vector<engine::TokenOutput>& tokens, wv1::TokenDelta& delta) {
  for (const engine::TokenOutput& t : tokens) {
    delta.add_token_ids(static_cast<uint32_t>(t.token));
    if (t.logprobs) ToProto(*t.logprobs, *delta.add_logprobs());
  }
}

void AppendPromptLogprobs(const std::vector<sampling::PositionLogprobs>& logprobs,
                          wv1::TokenDelta& delta) {
  for (const sampling::PositionLogprobs& p : logprobs) ToProto(p, *delta.add_prompt_logprobs());
}

wv1::Finished ToFinished(const engine::FinishInfo& info) {
  wv1::Finished f;
  f.set_reason(ToProto(info.reason));
  if (info.stop_token) f.set_stop_token_id(static_cast<uint32_t>(*info.stop_token));
  f.set_prompt_tokens(static_cast<uint32_t>(info.prompt_tokens));
  f.set_completion_tokens(static_cast<uint32_t>(info.completion_tokens));
  f.set_cached_prompt_tokens(static_cast<uint32_t>(info.cached_prompt_tokens));
  f.set_message(info.message);
  f.set_queue_time_s(info.queue_time_s);
  f.set_time_to_first_token_s(info.time_to_first_token_s);
  return f;
}

}  // namespace xserv::worker
