#include "worker/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace xserv::sampling {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", why));
}

}  // namespace

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return Bad("temperature", "must be finite and >= 0");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Bad("top_p", "must be in (0, 1]");
  if (top_k < -1) return Bad("top_k", "must be -1, 0 (off) or a positive count");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return Bad("repetition_penalty", "must be finite and > 0");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Bad("presence_penalty", "must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Bad("frequency_penalty", "must be in [-2, 2]");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return Bad("logit_bias", absl::StrCat("token id ", id, " is outside the vocabulary of ",
                                            vocab_size));
    }
    if (!std::isfinite(bias) || bias < -100.0f || bias > 100.0f) {
      return Bad("logit_bias", absl::StrCat("value for token ", id, " must be in [-100, 100]"));
    }
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return Bad("logprobs", absl::StrCat("must be between 0 and ", kMaxLogprobs));
  }
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxLogprobs) {
    return Bad("prompt_logprobs", absl::StrCat("must be between 0 and ", kMaxLogprobs));
  }
  return absl::OkStatus();
}

}  // namespace xserv::sampling
