// Sliding windows of the perplexity tool: every position but the first scored exactly once, with
// windows no longer than max_length and at least one token of context each.
#include "tools/perplexity/perplexity.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

TEST(SlidingWindows, FollowsTheHfRecipe) {
  auto w = SlidingWindows(10, 4, 2);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 4u);
  EXPECT_EQ((*w)[0].begin, 0);
  EXPECT_EQ((*w)[0].end, 4);
  EXPECT_EQ((*w)[0].score_begin, 1);
  EXPECT_EQ((*w)[1].begin, 2);
  EXPECT_EQ((*w)[1].end, 6);
  EXPECT_EQ((*w)[1].score_begin, 4);
  EXPECT_EQ((*w)[3].end, 10);
}

// With stride < max_length every position but the first is scored exactly once. With stride ==
// max_length the windows do not overlap and each window's first token has no context, so (as in
// HF's recipe, whose label shift drops it) it is not scored.
TEST(SlidingWindows, ScoreEveryPositionOnceForAnyShape) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = 1 + rng() % 300, length = 2 + rng() % 64, stride = 1 + rng() % length;
    auto windows = SlidingWindows(n, length, stride);
    ASSERT_TRUE(windows.ok());
    std::vector<int> scored(n, 0);
    for (const ScoreWindow& w : *windows) {
      EXPECT_LE(w.end - w.begin, length);
      EXPECT_GT(w.score_begin, w.begin);  // at least one token of context
      for (int64_t p = w.score_begin; p < w.end; ++p) ++scored[p];
    }
    EXPECT_EQ(scored[0], 0);
    for (int64_t p = 1; p < n; ++p) {
      const int want = stride == length && p % length == 0 ? 0 : 1;
      ASSERT_EQ(scored[p], want) << n << " " << length << " " << stride << " at " << p;
    }
  }
}

TEST(SlidingWindows, RefusesBadShapes) {
  EXPECT_FALSE(SlidingWindows(10, 1, 1).ok());
  EXPECT_FALSE(SlidingWindows(10, 4, 0).ok());
  EXPECT_FALSE(SlidingWindows(10, 4, 5).ok());
}

TEST(PerplexityResult, AccumulatesScoredPositionsOnly) {
  PerplexityResult r;
  const ScoreWindow w{.begin = 2, .end = 5, .score_begin = 3};
  ASSERT_TRUE(AddWindow(w, std::vector<double>{99.0, -1.0, -2.0}, r).ok());
  EXPECT_EQ(r.tokens_scored, 2);
  EXPECT_DOUBLE_EQ(r.perplexity(), std::exp(1.5));
  EXPECT_FALSE(AddWindow(w, std::vector<double>{0.0, -1.0}, r).ok());          // wrong length
  EXPECT_FALSE(AddWindow(w, std::vector<double>{0.0, -1.0, NAN}, r).ok());     // not finite
}

}  // namespace
}  // namespace xserv::tools
