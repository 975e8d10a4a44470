// Split behaviours (the cases of HF's normalizer.rs tests) and pre-tokenizer sequencing.
#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/regex.h"
#include "gtest/gtest.h"

namespace xserv::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

Pieces RunPieces(const PreTokenizer& pre, const std::string& text, bool* byte_level = nullptr) {
  PreTokenizeScratch scratch;
  const bool pending = pre.Run(text, &scratch);
  if (byte_level != nullptr) *byte_level = pending;
  Pieces out;
  for (size_t i = 0; i < scratch.pieces.size(); ++i) out.emplace_back(scratch.piece(i));
  return out;
}

PreTokenizerStep SplitStep(const std::string& pattern, SplitBehavior behavior, bool invert,
                           Regex::Kind kind = Regex::Kind::kLiteral) {
  PreTokenizerStep step;
  step.regex = std::shared_ptr<const Regex>(*Regex::Compile(pattern, kind));
  step.behavior = behavior;
  step.invert = invert;
  return step;
}

Pieces SplitDashes(SplitBehavior behavior, bool invert = false) {
  std::vector<PreTokenizerStep> steps;
  steps.push_back(SplitStep("-", behavior, invert));
  return RunPieces(PreTokenizer(std::move(steps)), "The-final--countdown");
}

TEST(PreTokenizerTest, SplitBehaviors) {
  EXPECT_EQ(SplitDashes(SplitBehavior::kRemoved), (Pieces{"The", "final", "countdown"}));
  EXPECT_EQ(SplitDashes(SplitBehavior::kIsolated),
            (Pieces{"The", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(SplitDashes(SplitBehavior::kMergedWithPrevious),
            (Pieces{"The-", "final-", "-", "countdown"}));
  EXPECT_EQ(SplitDashes(SplitBehavior::kMergedWithNext),
            (Pieces{"The", "-final", "-", "-countdown"}));
  EXPECT_EQ(SplitDashes(SplitBehavior::kContiguous),
            (Pieces{"The", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizerTest, InvertedSplit) {
  // Inverted, the words are the matches and each dash a separate gap.
  EXPECT_EQ(SplitDashes(SplitBehavior::kRemoved, true), (Pieces{"-", "-", "-"}));
  EXPECT_EQ(SplitDashes(SplitBehavior::kMergedWithPrevious, true),
            (Pieces{"The", "-final", "-", "-countdown"}));
}

TEST(PreTokenizerTest, ByteLevelWithRegexAndPrefixSpace) {
  std::vector<PreTokenizerStep> steps(1);
  steps[0].kind = PreTokenizerStep::Kind::kByteLevel;
  steps[0].regex = std::shared_ptr<const Regex>(
      *Regex::Compile(PreTokenizer::Gpt2Pattern(), Regex::Kind::kRegex));
  steps[0].add_prefix_space = true;
  bool byte_level = false;
  EXPECT_EQ(RunPieces(PreTokenizer(std::move(steps)), "Hello  world's 12!", &byte_level),
            (Pieces{" Hello", " ", " world", "'s", " 12", "!"}));
  EXPECT_TRUE(byte_level);
}

TEST(PreTokenizerTest, StepAfterByteLevelSeesMappedCharacters) {
  std::vector<PreTokenizerStep> steps(2);
  steps[0].kind = PreTokenizerStep::Kind::kByteLevel;  // no regex, no prefix
  steps[1] = SplitStep("\xC4\xA0", SplitBehavior::kMergedWithNext, false);  // "Ġ"
  bool byte_level = true;
  EXPECT_EQ(RunPieces(PreTokenizer(std::move(steps)), "a b", &byte_level),
            (Pieces{"a", "\xC4\xA0" "b"}));
  EXPECT_FALSE(byte_level);
}

TEST(PreTokenizerTest, EmptyInputHasNoPieces) {
  std::vector<PreTokenizerStep> steps;
  steps.push_back(SplitStep("x", SplitBehavior::kIsolated, false));
  EXPECT_TRUE(RunPieces(PreTokenizer(std::move(steps)), "").empty());
}

}  // namespace
}  // namespace xserv::tokenizer
