// StopStringMatcher: matches across deltas, hold-back never streams a partial stop string,
// include_stop_str_in_output, shared prefixes, Unicode, validation, and a randomized comparison
// with a brute-force reference over random chunkings.
#include "router/output/stop_string_matcher.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace xserv::router::output {
namespace {

struct Fed {
  std::string text;                 // everything emitted, Flush included
  std::vector<std::string> deltas;  // per Feed
  std::optional<size_t> stop_index;
};

StopStringMatcher Make(std::vector<std::string> stop, bool include = false) {
  auto matcher = StopStringMatcher::Create(
      StopStringOptions{.stop = std::move(stop), .include_stop_str_in_output = include});
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return std::move(*matcher);
}

Fed Feed(StopStringMatcher matcher, const std::vector<std::string>& deltas) {
  Fed run;
  for (const std::string& delta : deltas) {
    StopStringMatcher::FeedResult fed = matcher.Feed(delta);
    run.text += fed.text;
    run.deltas.push_back(fed.text);
    if (fed.stop_index.has_value()) {
      EXPECT_FALSE(run.stop_index.has_value()) << "reported twice";
      run.stop_index = fed.stop_index;
    }
  }
  run.text += matcher.Flush();
  return run;
}

// Reference: the occurrence ending first; the longest among those ending at the same byte.
std::pair<std::string, std::optional<size_t>> Reference(const std::string& text,
                                                        const std::vector<std::string>& stop,
                                                        bool include) {
  for (size_t end = 1; end <= text.size(); ++end) {
    std::optional<size_t> best;
    for (size_t i = 0; i < stop.size(); ++i) {
      if (stop[i].size() > end || text.compare(end - stop[i].size(), stop[i].size(), stop[i]))
        continue;
      if (!best.has_value() || stop[i].size() > stop[*best].size()) best = i;
    }
    if (best.has_value()) {
      return {text.substr(0, include ? end : end - stop[*best].size()), best};
    }
  }
  return {text, std::nullopt};
}

TEST(StopStringMatcherTest, NoStopStringsPassesThrough) {
  Fed run = Feed(Make({}), {"Hello", ", ", "world"});
  EXPECT_EQ(run.text, "Hello, world");
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"Hello", ", ", "world"}));
  EXPECT_FALSE(run.stop_index.has_value());
}

TEST(StopStringMatcherTest, StopSplitAcrossSingleCharacterDeltas) {
  Fed run = Feed(Make({"END"}), {"abc", "E", "N", "D", "more"});
  EXPECT_EQ(run.text, "abc");
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"abc", "", "", "", ""}));
  EXPECT_EQ(run.stop_index, 0u);
}

TEST(StopStringMatcherTest, StopSplitInsideDeltas) {
  Fed run = Feed(Make({"END"}), {"xxEN", "Dyy"});
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"xx", ""}));
  EXPECT_EQ(run.text, "xx");
  EXPECT_EQ(run.stop_index, 0u);
}

TEST(StopStringMatcherTest, IncludeStopString) {
  Fed run = Feed(Make({"END"}, /*include=*/true), {"xxEN", "Dyy"});
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"xx", "END"}));
  EXPECT_EQ(run.text, "xxEND");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher matcher = Make({"END"});
  EXPECT_EQ(matcher.Feed("aE").text, "a");
  EXPECT_EQ(matcher.held_back_bytes(), 1u);
  EXPECT_EQ(matcher.Feed("N").text, "");
  EXPECT_EQ(matcher.Feed("x").text, "ENx");
  EXPECT_EQ(matcher.Feed("EEN").text, "E");
  EXPECT_EQ(matcher.Flush(), "EN");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.Feed("END").text, "");  // nothing after Flush
}

TEST(StopStringMatcherTest, SharedPrefixesFirstToCompleteWins) {
  // "ab" completes before "abc" could.
  Fed run = Feed(Make({"abc", "ab"}), {"x", "a", "b", "c"});
  EXPECT_EQ(run.text, "x");
  EXPECT_EQ(run.stop_index, 1u);
  // Same end: the longer one is the match ("bc" vs "abc").
  run = Feed(Make({"bc", "abc"}), {"xa", "bc"});
  EXPECT_EQ(run.text, "x");
  EXPECT_EQ(run.stop_index, 1u);
  // A stop string inside another one's prefix.
  run = Feed(Make({"abcd", "bc"}), {"ab", "c", "d"});
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.stop_index, 1u);
}

TEST(StopStringMatcherTest, OverlappingSelfPrefix) {
  // "aab" inside "aaab": the automaton must fall back, not restart.
  Fed run = Feed(Make({"aab"}), {"a", "a", "a", "b", "c"});
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.stop_index, 0u);
}

TEST(StopStringMatcherTest, UnicodeStopString) {
  // "终止" is 6 bytes; deltas arrive as whole characters (the detokenizer never splits one).
  Fed run = Feed(Make({"终止"}), {"好的", "终", "止", "尾"});
  EXPECT_EQ(run.text, "好的");
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"好的", "", "", ""}));
  EXPECT_EQ(run.stop_index, 0u);
  // A held "终" that does not continue is released whole.
  run = Feed(Make({"终止"}), {"a终", "b"});
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"a", "终b"}));
  // Shared first byte (E7) between the held text and a different character.
  run = Feed(Make({"终止"}), {"终", "端"});
  EXPECT_EQ(run.text, "终端");
  EXPECT_FALSE(run.stop_index.has_value());
}

TEST(StopStringMatcherTest, ValidationRejectsBadEntries) {
  EXPECT_EQ(StopStringMatcher::Create({.stop = {"ok", ""}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StopStringMatcher::Create({.stop = {"\xE7\xBB"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StopStringMatcher::Create({.stop = {std::string(2000, 'a')}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StopStringMatcher::Create(
                {.stop = std::vector<std::string>(StopStringOptions::kMaxStopStrings + 1, "a")})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(StopStringMatcher::Create({.stop = {"a", "a"}}).ok());  // duplicates are harmless
}

TEST(StopStringMatcherTest, DuplicateReportsFirstIndex) {
  Fed run = Feed(Make({"x", "END", "END"}), {"aEND"});
  EXPECT_EQ(run.stop_index, 1u);
}

TEST(StopStringMatcherTest, LongOutputIsLinear) {
  // 4 MB of near-misses: would take seconds if the text were rescanned per delta.
  StopStringMatcher matcher = Make({"aaaaaaaaaaaaaaaab", "aaaaaaaaac"});
  size_t emitted = 0;
  for (int i = 0; i < (1 << 20); ++i) emitted += matcher.Feed("aaaa").text.size();
  EXPECT_LE(matcher.held_back_bytes(), 16u);
  emitted += matcher.Flush().size();
  EXPECT_EQ(emitted, 4u << 20);
}

TEST(StopStringMatcherTest, RandomMatchesReferenceWhateverTheChunking) {
  std::mt19937 rng(1234);
  const std::string alphabet = "abc";
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stop;
    const int num_stop = 1 + static_cast<int>(rng() % 4);
    for (int s = 0; s < num_stop; ++s) {
      std::string word;
      const int length = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < length; ++k) word += alphabet[rng() % alphabet.size()];
      stop.push_back(word);
    }
    std::string text;
    const int length = static_cast<int>(rng() % 24);
    for (int k = 0; k < length; ++k) text += alphabet[rng() % alphabet.size()];
    const bool include = rng() % 2;
    std::vector<std::string> deltas;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min(text.size() - pos, static_cast<size_t>(rng() % 5));
      deltas.push_back(text.substr(pos, n));
      pos += n;
    }
    const auto [want_text, want_index] = Reference(text, stop, include);
    StopStringMatcher matcher = Make(stop, include);
    std::string emitted;
    std::string fed;
    for (const std::string& delta : deltas) {
      fed += delta;
      emitted += matcher.Feed(delta).text;
      if (matcher.stopped()) break;
      // Safety: what was streamed is final whatever follows. Maximality: no suffix of the
      // streamed text plus held text is unneeded, i.e. the held text is a proper stop prefix.
      ASSERT_EQ(want_text.compare(0, emitted.size(), emitted), 0) << text;
      const std::string held = fed.substr(emitted.size());
      bool held_is_prefix = held.empty();
      for (const std::string& s : stop) {
        held_is_prefix = held_is_prefix || (held.size() < s.size() && s.starts_with(held));
      }
      ASSERT_TRUE(held_is_prefix) << text << " held " << held;
    }
    emitted += matcher.Flush();
    ASSERT_EQ(emitted, want_text) << text;
    ASSERT_EQ(matcher.stop_index(), want_index) << text;
  }
}

}  // namespace
}  // namespace xserv::router::output
