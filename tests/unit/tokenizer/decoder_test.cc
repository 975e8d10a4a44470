// Decoder chains (SentencePiece-style Replace/ByteFallback/Fuse/Strip and ByteLevel) and the
// incremental decoder's "deltas + Flush == Decode" contract.
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_decoder.h"
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

// Llama-2 style: "▁" for spaces, <0xNN> byte tokens, Replace + ByteFallback + Fuse + Strip.
Json SentencePieceStyle() {
  std::vector<std::string> vocab = {"<unk>", "<s>", "\xE2\x96\x81Hello", "\xE2\x96\x81world", "!"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back(name);
  }
  Json j = BpeJson(vocab, {});
  j["model"]["byte_fallback"] = true;
  j["added_tokens"] = Json::array({AddedTokenJson(1, "<s>", true)});
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return j;
}

constexpr uint32_t kByte0 = 5;  // id of <0x00>

TEST(DecoderTest, SentencePieceChain) {
  auto tok = Load(SentencePieceStyle());
  EXPECT_EQ(tok->Decode(Ids{2, 3, 4}), "Hello world!");
  // é = C3 A9 through byte tokens; an invalid byte run gives one U+FFFD per byte.
  EXPECT_EQ(tok->Decode(Ids{2, kByte0 + 0xC3, kByte0 + 0xA9}), "Hello\xC3\xA9");
  EXPECT_EQ(tok->Decode(Ids{kByte0 + 0xC3, kByte0 + 0xC3}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok->Decode(Ids{1, 2}), "<s> Hello");
  EXPECT_EQ(tok->Decode(Ids{1, 2}, true), "Hello");
}

TEST(DecoderTest, NoDecoderJoinsWithSpaces) {
  auto tok = Load(BpeJson({"a", "b"}, {}));
  EXPECT_EQ(tok->Decode(Ids{0, 1, 0}), "a b a");
}

std::string StreamAll(const Tokenizer& tok, const Ids& ids, bool skip) {
  IncrementalDecoder decoder(tok, skip);
  std::string out;
  for (uint32_t id : ids) out += decoder.Step(id);
  out += decoder.Flush();
  return out;
}

TEST(IncrementalDecoderTest, ByteLevelNeverEmitsBrokenUtf8) {
  Json j = BpeJson(ByteLevelVocab({}), {});
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = Json::array({AddedTokenJson(300, "<|x|>", true)});
  auto tok = Load(j);
  IncrementalDecoder decoder(*tok, false);
  // 😀 = F0 9F 98 80, one byte per token: nothing until the character is complete.
  EXPECT_EQ(decoder.Step('a'), "a");
  EXPECT_EQ(decoder.Step(0xF0), "");
  EXPECT_EQ(decoder.Step(0x9F), "");
  EXPECT_EQ(decoder.Step(0x98), "");
  EXPECT_EQ(decoder.Step(0x80), "\xF0\x9F\x98\x80");
  // An impossible continuation releases the replacement character at once.
  EXPECT_EQ(decoder.Step(0xE2), "");
  EXPECT_EQ(decoder.Step('b'), "\xEF\xBF\xBD" "b");
  EXPECT_EQ(decoder.Step(0xC3), "");
  EXPECT_EQ(decoder.Flush(), "\xEF\xBF\xBD");

  const Ids ids = {'x', 0xE4, 300, 0xBD, 0xA0, 300, 'y'};
  EXPECT_EQ(StreamAll(*tok, ids, false), tok->Decode(ids, false));
  EXPECT_EQ(StreamAll(*tok, ids, true), tok->Decode(ids, true));
  EXPECT_EQ(tok->Decode(ids, true), "x\xE4\xBD\xA0y");  // 你 joined across a skipped token
}

TEST(IncrementalDecoderTest, WindowStrategyMatchesDecode) {
  // Valid characters spelled with <0xNN> tokens (split across steps) mixed with word tokens.
  // Invalid byte runs are left out: HF's ByteFallback turns a whole run into one U+FFFD per
  // byte, so a later byte can change text already streamed; no streaming scheme can match that.
  auto tok = Load(SentencePieceStyle());
  std::mt19937 rng(7);
  const char32_t kChars[] = {0xE9, 0x4F60, 0x1F600, 0x3B1, 0x20AC};
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      if (rng() % 2 == 0) {
        ids.push_back(1 + rng() % 4);  // <s>, ▁Hello, ▁world, !
        continue;
      }
      std::string utf8;
      const char32_t c = kChars[rng() % 5];
      if (c < 0x800) {
        utf8 = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      } else if (c < 0x10000) {
        utf8 = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
                static_cast<char>(0x80 | (c & 0x3F))};
      } else {
        utf8 = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
                static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
      }
      for (char b : utf8) ids.push_back(kByte0 + static_cast<uint8_t>(b));
    }
    for (bool skip : {false, true}) {
      IncrementalDecoder decoder(*tok, skip);
      std::string streamed;
      for (uint32_t id : ids) {
        const std::string delta = decoder.Step(id);
        EXPECT_TRUE(delta.empty() || delta.find("\xEF\xBF\xBD") == std::string::npos);
        streamed += delta;
      }
      streamed += decoder.Flush();
      EXPECT_EQ(streamed, tok->Decode(ids, skip)) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace xserv::tokenizer
