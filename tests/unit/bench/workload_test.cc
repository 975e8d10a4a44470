// xserv-bench's workloads: lengths drawn within the range ratio, seeded determinism, random ids
// within the vocabulary bounds, text cuts of about the asked size that start at a word and never
// split a UTF-8 character.
#include "tools/bench/workload.h"

#include <set>

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

TEST(Workload, LengthsStayWithinTheRangeRatio) {
  std::mt19937 rng(1);
  std::set<int> seen;
  for (int i = 0; i < 2000; ++i) {
    const int n = DrawLength(100, 0.25, rng);
    ASSERT_GE(n, 75);
    ASSERT_LE(n, 125);
    seen.insert(n);
  }
  EXPECT_GT(seen.size(), 40u);  // spread over the range, not a constant
  EXPECT_TRUE(seen.count(75) && seen.count(125));
  EXPECT_EQ(DrawLength(100, 0.0, rng), 100);
  EXPECT_EQ(DrawLength(1, 0.9, rng), 1);  // never below one token
}

TEST(Workload, RandomPromptsAreSeededAndBounded) {
  WorkloadParams p{.input_len = 16, .output_len = 8, .range_ratio = 0.5, .vocab_low = 10,
                   .vocab_high = 20};
  ASSERT_TRUE(p.Validate().ok());
  const auto a = MakePrompts(p, "", 50, 42), b = MakePrompts(p, "", 50, 42);
  const auto c = MakePrompts(p, "", 50, 43);
  ASSERT_EQ(a.size(), 50u);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_ids, b[i].token_ids);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
    EXPECT_EQ(static_cast<int>(a[i].token_ids.size()), a[i].input_len);
    EXPECT_GE(a[i].input_len, 8);
    EXPECT_LE(a[i].input_len, 24);
    EXPECT_GE(a[i].output_len, 4);
    EXPECT_LE(a[i].output_len, 12);
    EXPECT_TRUE(a[i].text.empty());
    for (int id : a[i].token_ids) {
      EXPECT_GE(id, 10);
      EXPECT_LT(id, 20);
    }
    differs |= a[i].token_ids != c[i].token_ids;
  }
  EXPECT_TRUE(differs);
}

TEST(Workload, TextCutsStartAtWordsAndKeepUtf8Whole) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "Call me Ishmael — naïve whale ";
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    const std::string cut = CutText(text, 40, rng);
    ASSERT_GE(cut.size(), 36u);
    ASSERT_LE(cut.size(), 40u);
    EXPECT_NE(cut[0], ' ');
    EXPECT_NE(text.find(cut), std::string::npos);
    EXPECT_NE(static_cast<unsigned char>(cut.front()) & 0xC0, 0x80);
    // The byte after the cut begins a character: the cut ends on a boundary.
    const size_t end = text.find(cut) + cut.size();
    if (end < text.size()) {
      EXPECT_NE(static_cast<unsigned char>(text[end]) & 0xC0, 0x80);
    }
  }
  EXPECT_EQ(CutText("short", 40, rng), "short");
}

TEST(Workload, TextPromptsScaleWithCharsPerToken) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word" + std::to_string(i) + " ";
  WorkloadParams p{.dataset = Dataset::kText, .input_len = 10, .output_len = 3,
                   .chars_per_token = 3.0};
  const auto prompts = MakePrompts(p, text, 20, 7);
  for (const BenchPrompt& prompt : prompts) {
    EXPECT_TRUE(prompt.token_ids.empty());
    EXPECT_LE(prompt.text.size(), 30u);
    EXPECT_GE(prompt.text.size(), 26u);
    EXPECT_EQ(prompt.output_len, 3);
  }
  EXPECT_NE(prompts[0].text, prompts[1].text);
  EXPECT_FALSE((WorkloadParams{.range_ratio = 1.0}).Validate().ok());
  EXPECT_FALSE((WorkloadParams{.input_len = 0}).Validate().ok());
}

}  // namespace
}  // namespace xserv::tools
