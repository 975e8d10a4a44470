// Backend::Sample against the definition (kernels::SampleRowReference, whose semantics the
// sampler tests in tests/unit/sampling pin down): the drawn token, its raw logprob, rank and top-n
// for a grid of vocabularies and every processing option, including rows full of ties, NaN and
// -inf, and rows whose adjustments change the winner. On the CPU this checks the plumbing; on
// CUDA (cuda_op_suite_test) it checks the device kernels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/sampling.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits of several characters: smooth, coarse (many exact ties), peaked, and with NaN / -inf.
std::vector<float> MakeLogits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> x(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = &x[r * vocab];
    for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng);
    switch (r % 4) {
      case 1:  // quarter steps: ties everywhere, including at every cut
        for (int64_t i = 0; i < vocab; ++i) row[i] = std::round(row[i] * 4.0f) / 4.0f;
        break;
      case 2:  // one dominant token
        row[(r * 7919) % vocab] += 12.0f;
        break;
      case 3:  // masked and broken entries
        for (int64_t i = 0; i < vocab; i += 5) row[i] = -kInf;
        for (int64_t i = 2; i < vocab; i += 11) row[i] = kNaN;
        break;
      default:
        break;
    }
  }
  return x;
}

struct SpecCase {
  SampleRowSpec spec;
  std::vector<TokenAdjustment> adjustments;
};

// A spread of draw specs; adjustments touch tokens that matter (the row's current leaders).
std::vector<SpecCase> MakeDrawSpecs(int64_t rows, int64_t vocab, std::mt19937& rng) {
  const float temperatures[] = {0.0f, 0.4f, 1.0f, 1.7f};
  const int32_t top_ks[] = {0, 1, 2, 7, 50};
  const float top_ps[] = {1.0f, 0.93f, 0.61f};
  const float min_ps[] = {0.0f, 0.02f, 0.3f};
  const int32_t logprobs[] = {-1, 0, 5, 20};
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<SpecCase> cases(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    SampleRowSpec& s = cases[r].spec;
    s.mode = SampleMode::kDraw;
    s.temperature = temperatures[r % 4];
    s.top_k = top_ks[(r / 4) % 5];
    s.top_p = top_ps[(r / 3) % 3];
    s.min_p = min_ps[(r / 5) % 3];
    s.seed = 1000 + static_cast<uint64_t>(r);
    s.counter = static_cast<uint64_t>(r % 13);
    s.num_logprobs = logprobs[(r / 2) % 4];
    if (r % 3 == 0) {
      s.repetition_penalty = 1.3f;
      s.presence_penalty = 0.4f;
      s.frequency_penalty = 0.25f;
      std::vector<TokenAdjustment>& a = cases[r].adjustments;
      for (int k = 0; k < 40; ++k) {
        a.push_back(TokenAdjustment{.token = token(rng),
                                    .bias = (k % 4 == 0) ? 3.0f : 0.0f,
                                    .output_count = k % 3,
                                    .banned = k % 9 == 0,
                                    .seen = k % 2 == 0});
      }
      std::sort(a.begin(), a.end(), [](auto& l, auto& h) { return l.token < h.token; });
      a.erase(std::unique(a.begin(), a.end(), [](auto& l, auto& h) { return l.token == h.token; }),
              a.end());
    }
  }
  for (SpecCase& c : cases) c.spec.adjustments = c.adjustments;
  return cases;
}

// Results agree: same token (and rank / top ids when asked); logprobs within float rounding of a
// log-sum-exp summed in another order.
::testing::AssertionResult SameResult(const SampleRowResult& got, const SampleRowResult& want,
                                      const SampleRowSpec& spec) {
  if (got.token != want.token) {
    return ::testing::AssertionFailure() << "token " << got.token << " vs " << want.token;
  }
  if (spec.num_logprobs < 0) return ::testing::AssertionSuccess();
  auto close = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) <= 2e-5f * (1 + std::abs(b));
  };
  if (!close(got.logprob, want.logprob) || got.rank != want.rank || got.num_top != want.num_top) {
    return ::testing::AssertionFailure() << "logprob " << got.logprob << " vs " << want.logprob
                                         << ", rank " << got.rank << " vs " << want.rank
                                         << ", top " << got.num_top << " vs " << want.num_top;
  }
  for (int32_t i = 0; i < want.num_top; ++i) {
    if (got.top_ids[i] != want.top_ids[i] || !close(got.top_logprobs[i], want.top_logprobs[i])) {
      return ::testing::AssertionFailure() << "top " << i << ": " << got.top_ids[i] << " "
                                           << got.top_logprobs[i] << " vs " << want.top_ids[i]
                                           << " " << want.top_logprobs[i];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(SampleOpTest, DrawsMatchTheReference) {
  std::mt19937 rng(31);
  for (int64_t vocab : {3, 50, 1000, 151936}) {
    const int64_t rows = 120;
    const std::vector<float> x = MakeLogits(rows, vocab, rng);
    const std::vector<SpecCase> cases = MakeDrawSpecs(rows, vocab, rng);
    std::vector<SampleRowSpec> specs;
    for (const SpecCase& c : cases) specs.push_back(c.spec);
    std::vector<SampleRowResult> got(rows);
    ASSERT_TRUE(backend().Sample(UploadF32(x, {rows, vocab}), specs, got).ok()) << vocab;
    for (int64_t r = 0; r < rows; ++r) {
      const SampleRowResult want = SampleRowReference(
          std::span<const float>(&x[r * vocab], static_cast<size_t>(vocab)), specs[r]);
      EXPECT_TRUE(SameResult(got[r], want, specs[r])) << "vocab " << vocab << " row " << r;
    }
  }
}

// Many seeds on one row: the draw follows the reference token for token (a device that summed in
// another order could differ only for a uniform within rounding of a boundary).
TEST_P(SampleOpTest, SeededDrawsFollowTheReference) {
  std::mt19937 rng(32);
  const int64_t vocab = 4096, rows = 256;
  std::vector<float> one = MakeLogits(1, vocab, rng);
  std::vector<float> x;
  for (int64_t r = 0; r < rows; ++r) x.insert(x.end(), one.begin(), one.end());
  std::vector<SampleRowSpec> specs(rows);
  for (int64_t r = 0; r < rows; ++r) {
    specs[r].mode = SampleMode::kDraw;
    specs[r].temperature = 0.8f;
    specs[r].top_p = 0.95f;
    specs[r].seed = 77;
    specs[r].counter = static_cast<uint64_t>(r);
  }
  std::vector<SampleRowResult> got(rows);
  ASSERT_TRUE(backend().Sample(UploadF32(x, {rows, vocab}), specs, got).ok());
  std::vector<int32_t> distinct;
  for (int64_t r = 0; r < rows; ++r) {
    const SampleRowResult want = SampleRowReference(one, specs[r]);
    EXPECT_EQ(got[r].token, want.token) << "counter " << r;
    distinct.push_back(got[r].token);
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_GT(distinct.size(), 10u);  // the draws do vary with the counter
}

// A row's result does not depend on the rows around it (batch invariance of the sampler).
TEST_P(SampleOpTest, ARowsResultDoesNotDependOnItsBatch) {
  std::mt19937 rng(33);
  const int64_t vocab = 151936, rows = 9;
  const std::vector<float> x = MakeLogits(rows, vocab, rng);
  const std::vector<SpecCase> cases = MakeDrawSpecs(rows, vocab, rng);
  std::vector<SampleRowSpec> specs;
  for (const SpecCase& c : cases) specs.push_back(c.spec);
  specs[4].temperature = 1.0f;
  specs[4].num_logprobs = 5;
  std::vector<SampleRowResult> batch(rows);
  ASSERT_TRUE(backend().Sample(UploadF32(x, {rows, vocab}), specs, batch).ok());
  std::vector<float> alone_x(x.begin() + 4 * vocab, x.begin() + 5 * vocab);
  std::vector<SampleRowResult> alone(1);
  ASSERT_TRUE(backend().Sample(UploadF32(alone_x, {1, vocab}), std::span(&specs[4], 1), alone).ok());
  EXPECT_EQ(alone[0].token, batch[4].token);
  EXPECT_EQ(alone[0].logprob, batch[4].logprob);
  EXPECT_EQ(alone[0].rank, batch[4].rank);
}

// Prompt-logprob rows score a given token; skipped rows are left default; greedy-only batches
// (the device's arg-max shortcut) give the reference arg-max.
TEST_P(SampleOpTest, ScoresSkipsAndGreedyRows) {
  std::mt19937 rng(34);
  const int64_t vocab = 30000, rows = 8;
  const std::vector<float> x = MakeLogits(rows, vocab, rng);
  std::vector<SampleRowSpec> specs(rows);
  for (int64_t r = 0; r < rows; ++r) {
    specs[r].mode = r == 5 ? SampleMode::kSkip : SampleMode::kScore;
    specs[r].target = static_cast<int32_t>((r * 4099) % vocab);
    specs[r].num_logprobs = static_cast<int32_t>(r % 3) * 4;
  }
  std::vector<SampleRowResult> got(rows);
  ASSERT_TRUE(backend().Sample(UploadF32(x, {rows, vocab}), specs, got).ok());
  for (int64_t r = 0; r < rows; ++r) {
    const SampleRowResult want = SampleRowReference(
        std::span<const float>(&x[r * vocab], static_cast<size_t>(vocab)), specs[r]);
    EXPECT_TRUE(SameResult(got[r], want, specs[r])) << "row " << r;
  }
  EXPECT_EQ(got[5].token, 0);
  EXPECT_EQ(got[5].num_top, 0);

  std::vector<SampleRowSpec> greedy(rows);
  for (SampleRowSpec& s : greedy) s.mode = SampleMode::kDraw, s.temperature = 0.0f;
  greedy[2].mode = SampleMode::kSkip;
  ASSERT_TRUE(backend().Sample(UploadF32(x, {rows, vocab}), greedy, got).ok());
  for (int64_t r = 0; r < rows; ++r) {
    const SampleRowResult want = SampleRowReference(
        std::span<const float>(&x[r * vocab], static_cast<size_t>(vocab)), greedy[r]);
    EXPECT_EQ(got[r].token, want.token) << "row " << r;
  }
}

TEST_P(SampleOpTest, RefusesSpecsOutOfRange) {
  const int64_t vocab = 10;
  std::vector<float> x(2 * vocab, 0.0f);
  std::vector<SampleRowResult> results(2);
  auto code = [&](std::vector<SampleRowSpec> specs) {
    return backend().Sample(UploadF32(x, {2, vocab}), specs, results).code();
  };
  std::vector<SampleRowSpec> ok(2);
  EXPECT_EQ(code(ok), absl::StatusCode::kOk);
  EXPECT_EQ(code(std::vector<SampleRowSpec>(1)), absl::StatusCode::kInvalidArgument);
  std::vector<SampleRowSpec> bad = ok;
  bad[1].mode = SampleMode::kScore;
  bad[1].target = vocab;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = ok;
  bad[0].num_logprobs = kMaxSampleLogprobs + 1;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = ok;
  const TokenAdjustment unsorted[] = {{.token = 3}, {.token = 2}};
  bad[0].mode = SampleMode::kDraw;
  bad[0].adjustments = unsorted;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = ok;
  bad[0].mode = SampleMode::kDraw;
  bad[0].top_p = 0.0f;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace xserv::kernels::testing
