// Sampler: one row of f32 logits -> the next token (and logprob information), on the host.
// The CPU engine uses it directly; the CUDA backend will sample on the device with the same
// semantics and is tested against this.
//
// Order of processing (as vLLM): logit_bias, min-tokens mask, repetition / presence / frequency
// penalties, then greedy argmax or temperature -> top-k -> top-p -> min-p -> draw. Reported
// logprobs are those of the raw model distribution (log-softmax of the unprocessed logits), which
// is what OpenAI-style `logprobs` and echo report.
//
// Randomness is counter-based: the draw for a request's n-th generated token is a pure function of
// (seed, n), so a seeded request gives the same tokens whatever else shares its batch, and a
// preempted request resumes identically.
//
// Stateless and thread-compatible: the caller passes the per-request history.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

// `logits` is one row [vocab]; it is not modified.
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    const SamplingContext& context);

// True when Sample would return the plain arg-max of the raw logits and nothing else: greedy, no
// logit bias, neutral penalties, no logprobs, and no banned tokens in force (`bans_active`). The
// engine then lets the backend take the arg-max (Backend::ArgMax, the same tie rule).
bool OnlyArgMax(const SamplingParams& params, bool bans_active);

// Logprob information of `token` under the raw distribution `logits`, with the top `n`.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t n);

// Uniform double in [0, 1) for (seed, counter); splitmix64-based, identical on every platform.
double UniformForStep(uint64_t seed, uint64_t counter);

}  // namespace xserv::sampling
