// Sampler semantics: greedy ties, penalties and bias arithmetic, truncation (top-k / top-p /
// min-p) support sets, the sampled distribution against the softmax, seeded reproducibility and
// logprob reporting.
#include "worker/sampling/sampler.h"

#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace xserv::sampling {
namespace {

SamplingContext Ctx(uint64_t seed = 1, std::span<const int32_t> output = {}) {
  SamplingContext ctx;
  ctx.seed = seed;
  ctx.output_tokens = output;
  return ctx;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(Sampler, GreedyTakesLowestIdOnTiesAndSkipsNaN) {
  const std::vector<float> logits = {1.0f, 3.0f, NAN, 3.0f, -1.0f};
  EXPECT_EQ(Sample(logits, Greedy(), Ctx()).token, 1);
  const std::vector<float> all_nan = {NAN, NAN};
  EXPECT_EQ(Sample(all_nan, Greedy(), Ctx()).token, 0);
}

// DrawSpec merges bias, bans and penalties into one adjustment per token, ascending and unique
// (what every backend's Sample requires), and touches no token when nothing is asked for.
TEST(Sampler, DrawSpecMergesAdjustmentsPerToken) {
  std::vector<kernels::TokenAdjustment> adjustments;
  const std::vector<int32_t> prompt = {9, 4};
  const std::vector<int32_t> output = {4, 7, 4};
  const std::vector<int32_t> banned = {2};
  SamplingContext ctx = Ctx(5, output);
  ctx.prompt_tokens = prompt;
  ctx.banned_tokens = banned;
  SamplingParams p;
  p.logit_bias = {{7, 1.5f}, {2, -1.0f}};
  p.repetition_penalty = 1.2f;
  p.frequency_penalty = 0.5f;
  p.logprobs = 3;
  const kernels::SampleRowSpec spec = DrawSpec(p, ctx, adjustments);
  EXPECT_EQ(spec.mode, kernels::SampleMode::kDraw);
  EXPECT_EQ(spec.counter, 3u);
  EXPECT_EQ(spec.seed, 5u);
  EXPECT_EQ(spec.num_logprobs, 3);
  ASSERT_EQ(spec.adjustments.size(), 4u);
  const int32_t tokens[] = {2, 4, 7, 9};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(spec.adjustments[i].token, tokens[i]);
  EXPECT_TRUE(spec.adjustments[0].banned);
  EXPECT_FLOAT_EQ(spec.adjustments[0].bias, -1.0f);
  EXPECT_TRUE(spec.adjustments[1].seen);
  EXPECT_EQ(spec.adjustments[1].output_count, 2);
  EXPECT_FLOAT_EQ(spec.adjustments[2].bias, 1.5f);
  EXPECT_EQ(spec.adjustments[2].output_count, 1);
  EXPECT_TRUE(spec.adjustments[3].seen);
  EXPECT_EQ(spec.adjustments[3].output_count, 0);
  const kernels::SampleRowSpec plain = DrawSpec(Greedy(), Ctx(1, output), adjustments);
  EXPECT_TRUE(plain.adjustments.empty());
  EXPECT_TRUE(plain.greedy());
}

TEST(Sampler, LogitBiasAndBannedTokensChangeTheArgmax) {
  std::vector<float> logits = {0.0f, 5.0f, 4.0f};
  SamplingParams p = Greedy();
  p.logit_bias = {{2, 2.0f}};
  EXPECT_EQ(Sample(logits, p, Ctx()).token, 2);
  const std::vector<int32_t> banned = {2};
  SamplingContext ctx = Ctx();
  ctx.banned_tokens = banned;
  EXPECT_EQ(Sample(logits, p, ctx).token, 1);
}

TEST(Sampler, RepetitionPenaltyFollowsHfSigns) {
  // Token 0 (positive logit) is divided, token 1 (negative) multiplied; token 2 unseen.
  const std::vector<float> logits = {2.0f, -1.0f, 1.5f};
  SamplingParams p = Greedy();
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1};
  SamplingContext ctx = Ctx();
  ctx.prompt_tokens = prompt;
  // 2/2 = 1.0 < 1.5 -> token 2 wins; without the penalty token 0 would.
  EXPECT_EQ(Sample(logits, p, ctx).token, 2);
  p.repetition_penalty = 1.0f;
  EXPECT_EQ(Sample(logits, p, ctx).token, 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountOutputTokens) {
  const std::vector<float> logits = {3.0f, 2.5f};
  SamplingParams p = Greedy();
  p.frequency_penalty = 0.2f;
  const std::vector<int32_t> out = {0, 0};  // token 0 twice: 3.0 - 0.4 = 2.6 > 2.5
  EXPECT_EQ(Sample(logits, p, Ctx(1, out)).token, 0);
  p.presence_penalty = 0.2f;  // 3.0 - 0.2 - 0.4 = 2.4 < 2.5
  EXPECT_EQ(Sample(logits, p, Ctx(1, out)).token, 1);
}

std::map<int32_t, int> Histogram(const std::vector<float>& logits, const SamplingParams& p,
                                 int draws) {
  std::map<int32_t, int> counts;
  std::vector<int32_t> history;
  for (int i = 0; i < draws; ++i) {
    // Different step counters give independent draws from the same seed.
    history.resize(i);
    ++counts[Sample(logits, p, Ctx(99, history)).token];
  }
  return counts;
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  const int draws = 20000;
  const auto counts = Histogram(logits, p, draws);
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  for (int id = 0; id < 4; ++id) {
    const double expected = std::exp(logits[id] / 0.7) / z;
    const double observed = counts.count(id) ? counts.at(id) / double(draws) : 0.0;
    // 5 standard deviations of a binomial proportion.
    EXPECT_NEAR(observed, expected, 5 * std::sqrt(expected * (1 - expected) / draws)) << id;
  }
}

TEST(Sampler, TruncationRestrictsTheSupport) {
  const std::vector<float> logits = {3.0f, 2.9f, 1.0f, 0.5f, 0.0f};
  SamplingParams p;
  p.top_k = 2;
  for (const auto& [id, n] : Histogram(logits, p, 2000)) EXPECT_LT(id, 2) << n;
  p = SamplingParams{};
  p.top_p = 0.5f;  // p(0) ~ 0.44 < 0.5, so tokens 0 and 1 only
  const auto top_p = Histogram(logits, p, 2000);
  for (const auto& [id, n] : top_p) EXPECT_LT(id, 2) << n;
  EXPECT_EQ(top_p.size(), 2u);
  p = SamplingParams{};
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: ids 0, 1 (e^-0.1 ~ 0.9), not 2 (e^-2)
  for (const auto& [id, n] : Histogram(logits, p, 2000)) EXPECT_LT(id, 2) << n;
}

TEST(Sampler, SeedsReproduceAndDiffer) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  auto run = [&](uint64_t seed) {
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(Sample(logits, p, Ctx(seed, out)).token);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, LogprobsAreRawLogSoftmaxWithRankAndTop) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  SamplingParams p = Greedy();
  p.logprobs = 2;
  p.logit_bias = {{0, 10.0f}};  // changes the choice but not the reported distribution
  const SampleResult r = Sample(logits, p, Ctx());
  EXPECT_EQ(r.token, 0);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(r.logprobs.logprob, 1.0 - std::log(z), 1e-6);
  EXPECT_EQ(r.logprobs.rank, 4);
  ASSERT_EQ(r.logprobs.top.size(), 2u);
  EXPECT_EQ(r.logprobs.top[0].token, 1);  // tie between 1 and 3: lower id first
  EXPECT_EQ(r.logprobs.top[1].token, 3);
  const PositionLogprobs prompt = ComputeLogprobs(logits, 2, 0);
  EXPECT_EQ(prompt.rank, 3);
  EXPECT_TRUE(prompt.top.empty());
}

TEST(SamplingParams, ValidateNamesTheField) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate(100).ok());
  p.temperature = -1;
  EXPECT_NE(p.Validate(100).message().find("temperature"), std::string::npos);
  p = SamplingParams{};
  p.top_p = 0;
  EXPECT_NE(p.Validate(100).message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.logit_bias = {{100, 1.0f}};
  EXPECT_NE(p.Validate(100).message().find("logit_bias"), std::string::npos);
  p = SamplingParams{};
  p.logprobs = 21;
  EXPECT_NE(p.Validate(100).message().find("logprobs"), std::string::npos);
  p = SamplingParams{};
  p.repetition_penalty = 0;
  EXPECT_FALSE(p.Validate(100).ok());
}

TEST(Sampler, UniformIsInRangeAndSpread) {
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = kernels::UniformForStep(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace xserv::sampling
