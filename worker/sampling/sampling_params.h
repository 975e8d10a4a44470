// SamplingParams: how the engine turns one row of logits into the next token, with every default
// already applied (the gRPC layer maps proto `optional`s onto these and validates them).
//
// Plain data; copied into each request at admission and read by the engine-loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace xserv::sampling {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, ties -> lowest id)
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // 0 or -1 = off
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; HF semantics over prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; OpenAI semantics over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  std::optional<uint64_t> seed;     // absent: a per-request seed drawn by the engine
  int32_t logprobs = -1;            // -1: none; n >= 0: sampled token's logprob + top n
  int32_t prompt_logprobs = -1;     // same for every prompt position

  bool greedy() const { return temperature == 0.0f || top_k == 1; }

  // InvalidArgument naming the field for values outside the documented ranges; `vocab_size`
  // bounds logit_bias ids.
  absl::Status Validate(int64_t vocab_size) const;
};

inline constexpr int32_t kMaxLogprobs = 20;

}  // namespace xserv::sampling
