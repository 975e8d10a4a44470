// Sampling on the backend: one row of f32 logits -> the next token and the logprob information a
// request asked for. The types are shared by every backend; SampleRowReference is the definition
// (the CPU backend runs it; the CUDA kernels in cuda/sampling.cu are tested against it).
//
// A row is processed as vLLM does: adjustments (logit bias, bans, repetition / presence /
// frequency penalties, see TokenAdjustment), then greedy arg-max or temperature -> min-p -> top-k
// -> top-p -> one draw. Every cut keeps a prefix of the candidates in the total order
// "logit descending, then id ascending", which is also the order the draw walks; that order is what
// makes the result exact and identical on every backend (no sort-stability questions).
// Reported logprobs are those of the raw model distribution (log-softmax of the unadjusted
// logits), which is what OpenAI-style `logprobs` and echo report.
//
// Randomness is counter-based: the draw is a pure function of (seed, counter), the counter being
// the number of tokens the request has generated, so a seeded request gives the same tokens
// whatever shares its batch, and a preempted request resumes identically.
#pragma once

#include <cstdint>
#include <span>

namespace xserv::kernels {

inline constexpr int32_t kMaxSampleLogprobs = 20;

// How one token's logit is changed before sampling, in this order: + bias; banned -> -inf; seen
// (in the prompt or the output) -> HF repetition penalty (x > 0 ? x / rp : x * rp); then
// - presence_penalty * (output_count > 0) - frequency_penalty * output_count.
struct TokenAdjustment {
  int32_t token = 0;
  float bias = 0.0f;
  int32_t output_count = 0;
  bool banned = false;
  bool seen = false;
};

enum class SampleMode : int32_t {
  kSkip = 0,   // nothing is computed for this row
  kScore = 1,  // logprob information of `target` (prompt logprobs); no draw, no adjustments
  kDraw = 2,   // draw a token (greedy when temperature == 0 or top_k == 1)
};

struct SampleRowSpec {
  SampleMode mode = SampleMode::kSkip;
  int32_t target = 0;               // kScore: the token to score
  float temperature = 1.0f;
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  uint64_t counter = 0;
  int32_t num_logprobs = -1;        // -1: none; n in [0, kMaxSampleLogprobs]: logprob, rank, top n
  // Unique tokens (ascending) with any adjustment; ignored in kScore mode.
  std::span<const TokenAdjustment> adjustments;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
};

struct SampleRowResult {
  int32_t token = 0;     // drawn (kDraw) or scored (kScore)
  float logprob = 0.0f;  // raw-distribution logprob of `token` (when num_logprobs >= 0)
  int32_t rank = 0;      // 1-based rank of `token` in the total order
  int32_t num_top = 0;   // entries of top_ids / top_logprobs in use
  int32_t top_ids[kMaxSampleLogprobs] = {};
  float top_logprobs[kMaxSampleLogprobs] = {};
};

// The definition. `logits` is one row [vocab]; it is not modified.
SampleRowResult SampleRowReference(std::span<const float> logits, const SampleRowSpec& spec);

// Uniform double in [0, 1) for (seed, counter); splitmix64-based, identical on every platform
// (the CUDA kernels compute the same bits).
double UniformForStep(uint64_t seed, uint64_t counter);

}  // namespace xserv::kernels
