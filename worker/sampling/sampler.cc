#include "worker/sampling/sampler.h"

#include <algorithm>

#include <map>

namespace xserv::sampling {

kernels::SampleRowSpec DrawSpec(const SamplingParams& p, const SamplingContext& ctx,
                                std::vector<kernels::TokenAdjustment>& adjustments) {
  // Ordered by token id: the spec promises unique ascending tokens.
  std::map<int32_t, kernels::TokenAdjustment> by_token;
  auto at = [&](int32_t id) -> kernels::TokenAdjustment& {
    kernels::TokenAdjustment& a = by_token[id];
    a.token = id;
    return a;
  };
  for (const auto& [id, bias] : p.logit_bias) at(id).bias += bias;
  for (int32_t id : ctx.banned_tokens) at(id).banned = true;
  if (p.repetition_penalty != 1.0f) {
    for (int32_t id : ctx.prompt_tokens) at(id).seen = true;
    for (int32_t id : ctx.output_tokens) at(id).seen = true;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t id : ctx.output_tokens) ++at(id).output_count;
  }
  adjustments.clear();
  adjustments.reserve(by_token.size());
  for (const auto& [id, a] : by_token) adjustments.push_back(a);

  kernels::SampleRowSpec spec;
  spec.mode = kernels::SampleMode::kDraw;
  spec.temperature = p.temperature;
  spec.top_k = p.top_k;
  spec.top_p = p.top_p;
  spec.min_p = p.min_p;
  spec.repetition_penalty = p.repetition_penalty;
  spec.presence_penalty = p.presence_penalty;
  spec.frequency_penalty = p.frequency_penalty;
  spec.seed = ctx.seed;
  spec.counter = ctx.output_tokens.size();
  spec.num_logprobs = p.logprobs;
  spec.adjustments = adjustments;
  return spec;
}

kernels::SampleRowSpec ScoreSpec(int32_t target, int32_t n) {
  kernels::SampleRowSpec spec;
  spec.mode = kernels::SampleMode::kScore;
  spec.target = target;
  spec.num_logprobs = std::max(n, 0);
  return spec;
}

PositionLogprobs ToPositionLogprobs(const kernels::SampleRowResult& r) {
  PositionLogprobs out;
  out.token = r.token;
  out.logprob = r.logprob;
  out.rank = r.rank;
  for (int32_t i = 0; i < r.num_top; ++i) out.top.push_back({r.top_ids[i], r.top_logprobs[i]});
  return out;
}

SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    const SamplingContext& context) {
  std::vector<kernels::TokenAdjustment> adjustments;
  const kernels::SampleRowResult r =
      kernels::SampleRowReference(logits, DrawSpec(params, context, adjustments));
  SampleResult result{.token = r.token};
  if (params.logprobs >= 0) result.logprobs = ToPositionLogprobs(r);
  return result;
}

PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t n) {
  return ToPositionLogprobs(kernels::SampleRowReference(logits, ScoreSpec(token, n)));
}

}  // namespace xserv::sampling
