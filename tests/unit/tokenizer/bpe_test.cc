// BPE mechanics on inline tokenizer.json documents: merge order, both merge formats,
// ignore_merges, byte_fallback, unk handling, loader errors.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace xserv::tokenizer {
namespace {

using testing::BpeJson;
using testing::ByteLevelVocab;
using testing::Ids;
using testing::Json;
using testing::Load;

TEST(BpeTest, LowestRankMergesFirst) {
  // vocab: a=0 b=1 c=2 ab=3 bc=4 abc=5
  const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc"};
  auto bc_first = Load(BpeJson(vocab, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(bc_first->Encode("abc"), (Ids{0, 4}));  // no (a, bc) merge
  auto ab_first = Load(BpeJson(vocab, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  EXPECT_EQ(ab_first->Encode("abc"), (Ids{5}));
  EXPECT_EQ(ab_first->Encode("cab"), (Ids{2, 3}));
}

TEST(BpeTest, TiesGoToTheLeftmostPair) {
  auto tok = Load(BpeJson({"a", "aa"}, {{"a", "a"}}));
  EXPECT_EQ(tok->Encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(tok->Encode("aaaa"), (Ids{1, 1}));
}

TEST(BpeTest, PairAndStringMergeFormatsAgree) {
  const std::vector<std::string> vocab = {"x", "y", "z", "xy", "xyz"};
  const std::vector<std::pair<std::string, std::string>> merges = {{"x", "y"}, {"xy", "z"}};
  auto legacy = Load(BpeJson(vocab, merges, /*pair_merges=*/false));
  auto pairs = Load(BpeJson(vocab, merges, /*pair_merges=*/true));
  EXPECT_EQ(legacy->Encode("xyzxy"), (Ids{4, 3}));
  EXPECT_EQ(pairs->Encode("xyzxy"), (Ids{4, 3}));
}

TEST(BpeTest, IgnoreMergesEmitsWholeVocabWords) {
  // "abc" is in the vocab but no merge chain reaches it.
  Json j = BpeJson({"a", "b", "c", "ab", "abc"}, {{"a", "b"}});
  EXPECT_EQ(Load(j)->Encode("abc"), (Ids{3, 2}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Load(j)->Encode("abc"), (Ids{4}));
  EXPECT_EQ(Load(j)->Encode("abcab"), (Ids{3, 2, 3}));  // not whole: merges apply
}

TEST(BpeTest, ByteFallbackAndUnknowns) {
  std::vector<std::string> vocab = {"<unk>", "a"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back(name);
  }
  Json j = BpeJson(vocab, {});
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  auto tok = Load(j);
  // "é" = C3 A9 -> <0xC3> <0xA9> (ids 2 + byte)
  EXPECT_EQ(tok->Encode("a\xC3\xA9"), (Ids{1, 2 + 0xC3, 2 + 0xA9}));

  Json no_fallback = BpeJson({"<unk>", "a"}, {});
  no_fallback["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(Load(no_fallback)->Encode("a\xC3\xA9z"), (Ids{1, 0, 0}));
  no_fallback["model"]["fuse_unk"] = true;
  EXPECT_EQ(Load(no_fallback)->Encode("a\xC3\xA9z"), (Ids{1, 0}));
  no_fallback["model"]["unk_token"] = nullptr;
  EXPECT_EQ(Load(no_fallback)->Encode("a\xC3\xA9z" "a"), (Ids{1, 1}));  // dropped
}

TEST(BpeTest, ContinuingSubwordPrefix) {
  Json j = BpeJson({"a", "##b", "ab"}, {{"a", "##b"}});
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(Load(j)->Encode("ab"), (Ids{2}));
}

TEST(BpeTest, ByteLevelPipeline) {
  // Byte-level vocab with "Ġ" merges; GPT-2 style ByteLevel pre-tokenizer with its regex.
  const std::vector<std::string> vocab = ByteLevelVocab({"\xC4\xA0\xC4\xA0", "\xC4\xA0" "b"});
  Json j = BpeJson(vocab, {{"\xC4\xA0", "\xC4\xA0"}, {"\xC4\xA0", "b"}});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  auto tok = Load(j);
  // "a   b" splits into "a", "  ", " b" (the lookahead leaves one space for the word).
  const Ids ids = tok->Encode("a   b");
  EXPECT_EQ(ids, (Ids{'a', 256, 257}));
  EXPECT_EQ(tok->Decode(ids), "a   b");
}

TEST(BpeTest, LoaderErrorsNameTheProblem) {
  Json bad_merge = BpeJson({"a", "b"}, {{"a", "b"}});  // "ab" missing
  auto t1 = Tokenizer::FromJson(bad_merge.dump());
  ASSERT_FALSE(t1.ok());
  EXPECT_NE(t1.status().message().find("'ab'"), std::string::npos) << t1.status();

  Json bad_normalizer = BpeJson({"a"}, {});
  bad_normalizer["normalizer"] = {{"type", "Lowercase"}};
  auto t2 = Tokenizer::FromJson(bad_normalizer.dump());
  ASSERT_FALSE(t2.ok());
  EXPECT_NE(t2.status().message().find("Lowercase"), std::string::npos) << t2.status();

  Json wordpiece = BpeJson({"a"}, {});
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_FALSE(Tokenizer::FromJson(wordpiece.dump()).ok());
  EXPECT_FALSE(Tokenizer::FromJson("{not json").ok());
  EXPECT_FALSE(Tokenizer::FromJson("{\"model\": 3}").ok());
  EXPECT_FALSE(Tokenizer::FromFile("/nonexistent/dir").ok());
}

}  // namespace
}  // namespace xserv::tokenizer
