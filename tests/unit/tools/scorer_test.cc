// Scorer against HF: logprobs and top-k on tests/data/models/qwen3-tiny equal the log-softmax of
// the golden logits; chunked prefill equals one pass; malformed JSON lines get errors and the
// next line still works.
#include "worker/tools/scorer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/unit/model/model_test_util.h"
#include "tests/unit/tools/tools_test_util.h"
#include "worker/tools/model_maker.h"

namespace xserv::tools {
namespace {

using Json = nlohmann::json;
using testing::TestModelDir;

constexpr double kTolerance = 1e-4;

// log_softmax of one row, in double.
std::vector<double> LogSoftmax(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
  std::vector<double> out(vocab);
  for (int64_t v = 0; v < vocab; ++v) out[v] = row[v] - max - std::log(sum);
  return out;
}

class ScorerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scorer> MakeScorer(int chunk_tokens) {
    auto scorer = Scorer::Create(TestModelDir("qwen3-tiny"), backend_,
                                 ScorerOptions{.chunk_tokens = chunk_tokens});
    EXPECT_TRUE(scorer.ok()) << scorer.status();
    return scorer.ok() ? std::move(*scorer) : nullptr;
  }

  kernels::cpu::CpuBackend backend_{kernels::cpu::CpuBackendOptions{.num_threads = 2}};
};

TEST_F(ScorerTest, MatchesLogSoftmaxOfHfLogits) {
  const model::testing::Golden golden =
      model::testing::LoadGolden(TestModelDir("qwen3-tiny"));
  ASSERT_FALSE(golden.inputs.empty());
  std::unique_ptr<Scorer> scorer = MakeScorer(256);
  ASSERT_NE(scorer, nullptr);
  const int64_t vocab = scorer->config().vocab_size;
  constexpr int kTopK = 5;
  for (size_t g = 0; g < golden.inputs.size(); ++g) {
    const std::vector<int64_t> ids(golden.inputs[g].begin(), golden.inputs[g].end());
    auto scores = scorer->Score(ids, kTopK);
    ASSERT_TRUE(scores.ok()) << scores.status();
    ASSERT_EQ(scores->logprobs.size(), ids.size());
    ASSERT_EQ(scores->top.size(), ids.size());
    EXPECT_FALSE(scores->logprobs[0].has_value());
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const std::vector<double> expected = LogSoftmax(golden.logits[g].data() + pos * vocab, vocab);
      if (pos + 1 < ids.size()) {
        ASSERT_TRUE(scores->logprobs[pos + 1].has_value());
        EXPECT_NEAR(*scores->logprobs[pos + 1], expected[ids[pos + 1]], kTolerance)
            << "input " << g << " position " << pos + 1;
      }
      // Top-k: the right values, in order; ids may swap only within the tolerance.
      std::vector<double> sorted = expected;
      std::sort(sorted.rbegin(), sorted.rend());
      const auto& top = scores->top[pos];
      ASSERT_EQ(top.size(), static_cast<size_t>(kTopK));
      for (int j = 0; j < kTopK; ++j) {
        EXPECT_NEAR(top[j].second, sorted[j], kTolerance) << "input " << g << " pos " << pos;
        EXPECT_NEAR(top[j].second, expected[top[j].first], kTolerance);
        if (j > 0) {
          EXPECT_GE(top[j - 1].second, top[j].second);
        }
      }
    }
  }
}

TEST_F(ScorerTest, ChunkedPrefillEqualsOnePass) {
  const model::testing::Golden golden =
      model::testing::LoadGolden(TestModelDir("qwen3-tiny"));
  ASSERT_FALSE(golden.inputs.empty());
  const std::vector<int64_t> ids(golden.inputs[0].begin(), golden.inputs[0].end());
  ASSERT_GT(ids.size(), 14u);
  std::unique_ptr<Scorer> whole = MakeScorer(256), chunked = MakeScorer(7);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(chunked, nullptr);
  auto a = whole->Score(ids, 3);
  auto b = chunked->Score(ids, 3);
  auto again = chunked->Score(ids, 3);  // the KV cache is reused without leaking state
  ASSERT_TRUE(a.ok() && b.ok() && again.ok());
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NEAR(*a->logprobs[i], *b->logprobs[i], 1e-5) << i;
    EXPECT_EQ(*b->logprobs[i], *again->logprobs[i]) << i;
  }
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(a->top[i][0].first, b->top[i][0].first);
}

TEST_F(ScorerTest, MalformedLinesGetErrorsAndLaterLinesStillWork) {
  std::unique_ptr<Scorer> scorer = MakeScorer(64);
  ASSERT_NE(scorer, nullptr);
  std::string too_long = "{\"ids\": [1";
  for (int i = 1; i < 257; ++i) too_long += ", 1";  // max_position_embeddings is 256
  too_long += "]}";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not json", "JSON"},
      {"[1, 2]", "object"},
      {"{\"tokens\": [1]}", "ids"},
      {"{\"ids\": 5}", "ids"},
      {"{\"ids\": [1, \"a\"]}", "integers"},
      {"{\"ids\": [1.5]}", "integers"},
      {"{\"ids\": []}", "empty"},
      {"{\"ids\": [3, 512]}", "vocabulary"},
      {"{\"ids\": [-1]}", "vocabulary"},
      {too_long, "positions"},
  };
  for (const auto& [line, what] : bad) {
    const Json reply = Json::parse(ScoreJsonLine(*scorer, line, 2));
    ASSERT_TRUE(reply.contains("error")) << line;
    EXPECT_NE(reply["error"].get<std::string>().find(what), std::string::npos)
        << line << " -> " << reply.dump();
  }
  const Json ok = Json::parse(ScoreJsonLine(*scorer, "{\"ids\": [5, 6, 7]}", 2));
  ASSERT_FALSE(ok.contains("error")) << ok.dump();
  ASSERT_EQ(ok["logprobs"].size(), 3u);
  EXPECT_TRUE(ok["logprobs"][0].is_null());
  EXPECT_TRUE(ok["logprobs"][1].is_number());
  ASSERT_EQ(ok["top"].size(), 3u);
  ASSERT_EQ(ok["top"][2].size(), 2u);
  EXPECT_TRUE(ok["top"][2][0][0].is_number_integer());
  EXPECT_LE(ok["top"][2][0][1].get<double>(), 0.0);
}

// 300 tokens of a generated GPT-2 (1024 positions): longer than the Scorer's first KV pool (256
// tokens), so the pool grows; 64-token chunks must agree with one 512-token pass.
TEST_F(ScorerTest, LongInputGrowsTheKvCacheAndChunksAgree) {
  const std::string tokenizer_dir = testing::TokenizerDir("gpt2");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  testing::ScratchDir tmp;
  ASSERT_TRUE(MakeModel({.arch = ModelArch::kGpt2,
                         .preset = ModelPreset::kTiny,
                         .seed = 2,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = tmp.path(),
                         .dtype = safetensors::DType::kF32})
                  .ok());
  std::vector<int64_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back((i * 7919 + 13) % 50257);
  auto whole = Scorer::Create(tmp.path(), backend_, ScorerOptions{.chunk_tokens = 512});
  auto chunked = Scorer::Create(tmp.path(), backend_, ScorerOptions{.chunk_tokens = 64});
  ASSERT_TRUE(whole.ok() && chunked.ok());
  ASSERT_TRUE((*chunked)->Score({ids.data(), 20}, 1).ok());  // a short input first: small pool
  auto a = (*whole)->Score(ids, 1);
  auto b = (*chunked)->Score(ids, 1);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_NEAR(*a->logprobs[i], *b->logprobs[i], 1e-5) << i;
}

TEST(TopKTest, DescendingWithTiesByLowerId) {
  const std::vector<float> values = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 1.0f};
  const auto top = TopK(values, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0], (std::pair<int32_t, float>{1, 2.0f}));
  EXPECT_EQ(top[1], (std::pair<int32_t, float>{3, 2.0f}));
  EXPECT_EQ(top[2], (std::pair<int32_t, float>{2, 1.0f}));
  EXPECT_EQ(top[3], (std::pair<int32_t, float>{5, 1.0f}));
  EXPECT_EQ(TopK(values, 100).size(), values.size());
  EXPECT_TRUE(TopK(values, 0).empty());
}

}  // namespace
}  // namespace xserv::tools
