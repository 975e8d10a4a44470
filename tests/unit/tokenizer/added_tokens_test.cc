// Added tokens: whole matches before pre-tokenization, special or not, leftmost-longest,
// lstrip / rstrip / single_word / normalized, and their decoding.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace xserv::tokenizer {
namespace {

using testing::AddedTokenJson;
using testing::BpeJson;
using testing::ByteLevelVocab;
using testing::Ids;
using testing::Json;
using testing::Load;

// Byte-level tokenizer (ids 0..255 = bytes) with a Qwen-like Split + ByteLevel pre-tokenizer.
Json ByteLevelBase() {
  Json j = BpeJson(ByteLevelVocab({}), {});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "\\s+(?!\\S)|\\s+|\\S+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

constexpr uint32_t kSpecial = 300;  // "<|x|>", special
constexpr uint32_t kThink = 301;    // "<think>", not special
constexpr uint32_t kLong = 302;     // "<think>x", longer than kThink

Json WithAddedTokens(Json j, bool lstrip = false, bool rstrip = false) {
  j["added_tokens"] = Json::array({AddedTokenJson(kSpecial, "<|x|>", true, lstrip, rstrip),
                                   AddedTokenJson(kThink, "<think>", false),
                                   AddedTokenJson(kLong, "<think>x", false)});
  return j;
}

TEST(AddedTokensTest, SpecialAndNonSpecialAreMatchedWhole) {
  auto tok = Load(WithAddedTokens(ByteLevelBase()));
  EXPECT_EQ(tok->Encode("a<|x|>b"), (Ids{'a', kSpecial, 'b'}));
  EXPECT_EQ(tok->Encode("<think>y"), (Ids{kThink, 'y'}));
  EXPECT_EQ(tok->Encode("<think>x"), (Ids{kLong}));  // longest wins at the same start
  EXPECT_EQ(tok->Encode("<|x|<|x|>"), (Ids{'<', '|', 'x', '|', kSpecial}));
  EXPECT_TRUE(tok->IsSpecial(kSpecial));
  EXPECT_FALSE(tok->IsSpecial(kThink));
  EXPECT_EQ(tok->TokenToId("<think>"), kThink);
  EXPECT_EQ(tok->IdToToken(kSpecial), "<|x|>");
  EXPECT_EQ(tok->vocab_size(), kLong + 1);
}

TEST(AddedTokensTest, DecodeKeepsOrSkipsSpecialTokens) {
  auto tok = Load(WithAddedTokens(ByteLevelBase()));
  const Ids ids = {'a', kSpecial, kThink, 'b'};
  EXPECT_EQ(tok->Decode(ids), "a<|x|><think>b");
  EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/true), "a<think>b");
  EXPECT_EQ(tok->Decode(Ids{'a', 99999}), "a");  // unknown ids are dropped
}

TEST(AddedTokensTest, LstripAndRstripSwallowWhitespace) {
  auto plain = Load(WithAddedTokens(ByteLevelBase()));
  EXPECT_EQ(plain->Encode("a  <|x|>  b"), (Ids{'a', ' ', ' ', kSpecial, ' ', ' ', 'b'}));
  auto both = Load(WithAddedTokens(ByteLevelBase(), true, true));
  EXPECT_EQ(both->Encode("a  <|x|>  b"), (Ids{'a', kSpecial, 'b'}));
  auto left = Load(WithAddedTokens(ByteLevelBase(), true, false));
  EXPECT_EQ(left->Encode("a \n<|x|> b"), (Ids{'a', kSpecial, ' ', 'b'}));
}

TEST(AddedTokensTest, SingleWordOnlyMatchesWholeWords) {
  Json j = ByteLevelBase();
  j["added_tokens"] = Json::array({AddedTokenJson(kSpecial, "hi", false, false, false, true)});
  auto tok = Load(j);
  EXPECT_EQ(tok->Encode("hi there"), (Ids{kSpecial, ' ', 't', 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(tok->Encode("chi"), (Ids{'c', 'h', 'i'}));
  EXPECT_EQ(tok->Encode("hi_"), (Ids{'h', 'i', '_'}));
  EXPECT_EQ(tok->Encode("(hi)"), (Ids{'(', kSpecial, ')'}));
}

TEST(AddedTokensTest, NormalizedTokensMatchAfterNormalization) {
  // "é" written decomposed in the input matches a normalized=true token after NFC.
  Json j = ByteLevelBase();
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = Json::array(
      {AddedTokenJson(kSpecial, "\xC3\xA9", false, false, false, false, /*normalized=*/true),
       AddedTokenJson(kThink, "e\xCC\x81!", false, false, false, false, /*normalized=*/false)});
  auto tok = Load(j);
  EXPECT_EQ(tok->Encode("ae\xCC\x81"), (Ids{'a', kSpecial}));
  // normalized=false tokens match the raw text before NFC.
  EXPECT_EQ(tok->Encode("e\xCC\x81!"), (Ids{kThink}));
}

TEST(AddedTokensTest, InvalidUtf8InputBecomesReplacementCharacters) {
  auto tok = Load(ByteLevelBase());
  // 0xFF -> U+FFFD (EF BF BD) before tokenization, like Python's errors='replace'.
  EXPECT_EQ(tok->Encode("a\xFF"), (Ids{'a', 0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(tok->Decode(Ids{'a', 0xE2, 0x82}), "a\xEF\xBF\xBD");
  EXPECT_EQ(tok->Decode(Ids{0xC0, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace xserv::tokenizer
