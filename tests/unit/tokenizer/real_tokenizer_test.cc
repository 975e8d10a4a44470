// The real tokenizers fetched by scripts/fetch-assets.sh (skipped when absent): hand-checked
// ids, thread safety, and robustness (random bytes and random Unicode never crash; decode
// inverts encode; streaming decode equals decode).
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace xserv::tokenizer {
namespace {

using testing::AssetTokenizerDir;
using testing::HaveAssetTokenizer;
using testing::Ids;

// Loading is the slow part; each real tokenizer is loaded once for the whole binary.
const Tokenizer* Real(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>>* cache =
      new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = cache->find(name);
  if (it != cache->end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  if (HaveAssetTokenizer(name)) {
    auto loaded = Tokenizer::FromFile(AssetTokenizerDir(name));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (loaded.ok()) tok = std::move(*loaded);
  }
  const Tokenizer* result = tok.get();
  (*cache)[name] = std::move(tok);
  return result;
}

#define REQUIRE_TOKENIZER(var, name)                                                  \
  const Tokenizer* var = Real(name);                                                  \
  if (var == nullptr) GTEST_SKIP() << name << " not found under .assets/tokenizers; " \
                                          "run scripts/fetch-assets.sh"

TEST(RealTokenizerTest, Qwen3KnownIds) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  EXPECT_EQ(tok->Encode("<|im_start|>user"), (Ids{151644, 872}));
  EXPECT_EQ(tok->Encode("<think>"), (Ids{151667}));
  EXPECT_EQ(tok->Encode("</think>"), (Ids{151668}));
  EXPECT_EQ(tok->Encode("Hello world!"), (Ids{9707, 1879, 0}));
  // "a   b" -> "a", "  ", " b".
  EXPECT_EQ(tok->Encode("a   b"), (Ids{64, 256, 293}));
  EXPECT_TRUE(tok->IsSpecial(151644));
  EXPECT_FALSE(tok->IsSpecial(151667));
  EXPECT_EQ(tok->vocab_size(), 151669u);
  EXPECT_EQ(tok->TokenToId("<|im_end|>"), 151645u);
  EXPECT_EQ(tok->Decode(Ids{151644, 872, 198, 9707}, false), "<|im_start|>user\nHello");
  EXPECT_EQ(tok->Decode(Ids{151644, 872, 198, 9707}, true), "user\nHello");
  EXPECT_FALSE(tok->bos_id().has_value());
  // NFC: a decomposed "é" encodes like the precomposed one.
  EXPECT_EQ(tok->Encode("caf\x65\xCC\x81"), tok->Encode("caf\xC3\xA9"));
}

TEST(RealTokenizerTest, OtherTokenizersKnownIds) {
  if (const Tokenizer* gpt2 = Real("gpt2")) {
    EXPECT_EQ(gpt2->Encode("Hello world"), (Ids{15496, 995}));
    EXPECT_EQ(gpt2->Encode("<|endoftext|>"), (Ids{50256}));
    EXPECT_EQ(gpt2->vocab_size(), 50257u);
  }
  if (const Tokenizer* oss = Real("gpt-oss")) {
    EXPECT_EQ(oss->Encode("<|start|>assistant<|channel|>analysis<|message|>"),
              (Ids{200006, 173781, 200005, 35644, 200008}));
    EXPECT_EQ(oss->TokenToId("<|return|>"), 200002u);
    EXPECT_EQ(oss->TokenToId("<|call|>"), 200012u);
  }
  if (const Tokenizer* llama = Real("llama3")) {
    EXPECT_EQ(llama->bos_id(), 128000u);
    EXPECT_EQ(llama->Encode("Hello world"), (Ids{9906, 1917}));  // no BOS added
  }
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() & 0xFF));
  return s;
}

std::string RandomUnicode(std::mt19937& rng, size_t n) {
  static const std::pair<char32_t, char32_t> kRanges[] = {
      {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},    {0x300, 0x36F},  {0x370, 0x52F},
      {0x590, 0x6FF},   {0x900, 0xDFF},   {0x1100, 0x11FF}, {0x2000, 0x206F}, {0x3000, 0x30FF},
      {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFB00, 0xFFFD}, {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto& [lo, hi] = kRanges[rng() % std::size(kRanges)];
    char32_t c = lo + rng() % (hi - lo + 1);
    if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
    AppendUtf8(c, &s);
  }
  return s;
}

std::string StreamDecode(const Tokenizer& tok, const Ids& ids) {
  IncrementalDecoder decoder(tok, false);
  std::string out;
  for (uint32_t id : ids) {
    const std::string delta = decoder.Step(id);
    EXPECT_TRUE(IsValidUtf8(delta));
    out += delta;
  }
  return out + decoder.Flush();
}

void CheckRobustness(const Tokenizer& tok, bool nfc, uint32_t seed) {
  std::mt19937 rng(seed);
  Normalizer normalizer(nfc ? std::vector<UnicodeForm>{UnicodeForm::kNfc}
                            : std::vector<UnicodeForm>{});
  for (int i = 0; i < 1500; ++i) {
    const std::string bytes = RandomBytes(rng, rng() % 64);
    const Ids ids = tok.Encode(bytes);
    const std::string decoded = tok.Decode(ids);
    EXPECT_TRUE(IsValidUtf8(decoded));
    EXPECT_EQ(StreamDecode(tok, ids), decoded);

    const std::string text = RandomUnicode(rng, rng() % 48);
    const Ids text_ids = tok.Encode(text);
    std::string storage;
    // The random text never contains "<|", so no special token can appear.
    ASSERT_EQ(tok.Decode(text_ids), std::string(normalizer.Normalize(text, &storage)))
        << "seed " << seed << " case " << i;
    EXPECT_EQ(StreamDecode(tok, text_ids), tok.Decode(text_ids));

    // Random ids, including ones past the vocabulary, decode without crashing.
    Ids random_ids;
    for (int k = 0; k < 8; ++k) random_ids.push_back(rng() % (tok.vocab_size() + 10));
    EXPECT_EQ(StreamDecode(tok, random_ids), tok.Decode(random_ids));
  }
}

TEST(RealTokenizerTest, RobustnessQwen3) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  CheckRobustness(*tok, /*nfc=*/true, 1);
}

TEST(RealTokenizerTest, RobustnessGptOssGpt2Llama3) {
  for (const char* name : {"gpt-oss", "gpt2", "llama3"}) {
    if (const Tokenizer* tok = Real(name)) CheckRobustness(*tok, /*nfc=*/false, 2);
  }
}

TEST(RealTokenizerTest, LongInputsDoNotBlowUp) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  const std::string spaces(200000, ' ');
  EXPECT_EQ(tok->Decode(tok->Encode(spaces + "x")), spaces + "x");
  const std::string word(100000, 'a');
  EXPECT_EQ(tok->Decode(tok->Encode(word)), word);
  const std::string digits(50000, '7');
  EXPECT_EQ(tok->Encode(digits).size(), digits.size());  // Qwen splits digits one by one
}

TEST(RealTokenizerTest, ConcurrentEncodeMatchesSerial) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  std::vector<std::string> texts;
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) texts.push_back(RandomUnicode(rng, 30) + " words and more words");
  std::vector<Ids> expected;
  for (const std::string& t : texts) expected.push_back(tok->Encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = t; i < texts.size(); i += 2) {
          if (tok->Encode(texts[i]) != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace xserv::tokenizer
