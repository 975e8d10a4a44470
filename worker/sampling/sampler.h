// Sampler: the request-level face of sampling. It turns SamplingParams plus the request's history
// into the backend's per-row spec (kernels/sampling.h, which defines the semantics and runs on the
// device), and offers a host-side Sample over one row for tests and tools. Reported logprobs are
// those of the raw model distribution.
//
// Stateless and thread-compatible: the caller passes the per-request history.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling.h"
#include "worker/sampling/sampling_params.h"

namespace xserv::sampling {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct PositionLogprobs {
  int32_t token = 0;        // the chosen (or, for prompt logprobs, the actual next) token
  float logprob = 0.0f;     // its logprob under the raw distribution
  int32_t rank = 0;         // 1-based rank of `token` (1 = most likely)
  std::vector<TokenLogprob> top;  // top-n alternatives, descending logprob, ties lower id first
};

// What the sampler needs to know about the request at this step.
struct SamplingContext {
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;   // generated so far
  uint64_t seed = 0;                          // params.seed or the engine's per-request seed
  std::span<const int32_t> banned_tokens;     // e.g. EOS and stop ids while below min_tokens
};

struct SampleResult {
  int32_t token = 0;
  PositionLogprobs logprobs;  // filled when params.logprobs >= 0
};

// The backend spec of a draw row: sampling fields from `params`, the seed and counter (tokens
// generated so far) from `context`, and one adjustment per token that bias, bans or penalties
// touch, written to `adjustments` (which the spec then points into; keep it alive).
kernels::SampleRowSpec DrawSpec(const SamplingParams& params, const SamplingContext& context,
                                std::vector<kernels::TokenAdjustment>& adjustments);

// The backend spec of a prompt-logprobs row: `target`'s logprob with the top `n`.
kernels::SampleRowSpec ScoreSpec(int32_t target, int32_t n);

// What the backend returned for a row, as reported logprobs.
PositionLogprobs ToPositionLogprobs(const kernels::SampleRowResult& result);

// `logits` is one row [vocab]; it is not modified. Host-side (the backend's reference).
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    const SamplingContext& context);

// Logprob information of `token` under the raw distribution `logits`, with the top `n`.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t n);

}  // namespace xserv::sampling
