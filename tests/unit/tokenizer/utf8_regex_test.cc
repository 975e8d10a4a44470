// UTF-8 error recovery (checked against Python's bytes.decode('utf-8', 'replace')), the
// Oniguruma-compatible regex wrapper and the NFC quick check.
#include <string>
#include <vector>

#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace xserv::tokenizer {
namespace {

std::string Lossy(const std::string& bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, &out);
  return out;
}

std::string Fffd(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += "\xEF\xBF\xBD";
  return out;
}

TEST(Utf8Test, LossyMatchesPythonMaximalSubparts) {
  // Each expectation was produced by CPython 3: bytes.decode('utf-8', errors='replace').
  EXPECT_EQ(Lossy("\xF0\x90\x80"), Fffd(1));
  EXPECT_EQ(Lossy("\xC0\x80"), Fffd(2));
  EXPECT_EQ(Lossy("\xED\xA0\x80"), Fffd(3));  // surrogate
  EXPECT_EQ(Lossy("\xE2\x82" "A"), Fffd(1) + "A");
  EXPECT_EQ(Lossy("\xF4\x90\x80\x80"), Fffd(4));  // above U+10FFFF
  EXPECT_EQ(Lossy("\x80\x80"), Fffd(2));
  EXPECT_EQ(Lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(Lossy("\xE0\x80\xAF"), Fffd(3));  // overlong
  EXPECT_EQ(Lossy("\xF0\x9F\x98"), Fffd(1));
  EXPECT_EQ(Lossy("\xF0\x9F\x98\x80\xF0"), "\xF0\x9F\x98\x80\xEF\xBF\xBD");
  EXPECT_EQ(Lossy("plain ascii"), "plain ascii");
}

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("héllo 世界 😀 and a long ascii tail to cross 8-byte blocks"));
  EXPECT_FALSE(IsValidUtf8("long ascii prefix crossing blocks \xC3"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));
}

TEST(Utf8Test, IncompleteSuffix) {
  EXPECT_EQ(IncompleteUtf8SuffixLength("ab"), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xC0"), 0u);              // never valid
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xF0\x80"), 0u);          // already invalid
  EXPECT_EQ(IncompleteUtf8SuffixLength("\x80"), 0u);
}

std::vector<std::string> Matches(const std::string& pattern, const std::string& text) {
  auto regex = Regex::Compile(pattern, Regex::Kind::kRegex);
  EXPECT_TRUE(regex.ok()) << regex.status();
  std::vector<RegexMatch> matches;
  (*regex)->FindAll(text, &matches);
  std::vector<std::string> out;
  for (const RegexMatch& m : matches) out.push_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

constexpr char kQwenPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

TEST(RegexTest, LookaheadKeepsOneSpaceForTheNextWord) {
  EXPECT_EQ(Matches(kQwenPattern, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(Matches(kQwenPattern, "a   "), (std::vector<std::string>{"a", "   "}));
  EXPECT_EQ(Matches(kQwenPattern, "I'M 42"),
            (std::vector<std::string>{"I", "'M", " ", "4", "2"}));
}

TEST(RegexTest, WhitespaceClassIncludesNextLineLikeOniguruma) {
  EXPECT_EQ(Matches("\\s+", "a\xC2\x85 b"), (std::vector<std::string>{"\xC2\x85 "}));
  EXPECT_EQ(Matches("[^\\s]+", "a\xC2\x85" "b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(TranslateOnigurumaPattern("[^\\s\\p{L}]\\S\\w"),
            "[^\\s\\x{85}\\p{L}][^\\s\\x{85}][\\p{L}\\p{M}\\p{N}\\p{Pc}]");
  EXPECT_EQ(TranslateOnigurumaPattern("[]\\s]\\Q\\s\\E"), "[]\\s\\x{85}]\\Q\\s\\E");
}

TEST(RegexTest, EmptyMatchesAdvance) {
  // Like the onig crate: an empty match right after a match is skipped.
  EXPECT_EQ(Matches("a*", "baa"), (std::vector<std::string>{"", "aa"}));
  auto literal = Regex::Compile("a.b", Regex::Kind::kLiteral);
  ASSERT_TRUE(literal.ok());
  std::vector<RegexMatch> m;
  (*literal)->FindAll("xa.bya_b", &m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 1u);
}

TEST(RegexTest, BadPatternIsAnError) {
  auto regex = Regex::Compile("(unclosed", Regex::Kind::kRegex);
  EXPECT_FALSE(regex.ok());
}

TEST(NormalizerTest, NfcQuickCheckAndComposition) {
  EXPECT_TRUE(IsNfcQuickStable("plain ascii"));
  EXPECT_TRUE(IsNfcQuickStable("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsNfcQuickStable("e\xCC\x81"));          // e + combining acute
  EXPECT_FALSE(IsNfcQuickStable("\xE2\x84\xAB"));       // U+212B ANGSTROM SIGN (singleton)
  EXPECT_FALSE(IsNfcQuickStable("\xE1\x84\x80\xE1\x85\xA1"));  // Hangul L + V jamo
  Normalizer nfc({UnicodeForm::kNfc});
  std::string storage;
  EXPECT_EQ(nfc.Normalize("e\xCC\x81", &storage), "\xC3\xA9");
  EXPECT_EQ(nfc.Normalize("\xE2\x84\xAB", &storage), "\xC3\x85");
  EXPECT_EQ(nfc.Normalize("\xE1\x84\x80\xE1\x85\xA1", &storage), "\xEA\xB0\x80");
  EXPECT_EQ(nfc.Normalize("unchanged", &storage), "unchanged");
}

}  // namespace
}  // namespace xserv::tokenizer
