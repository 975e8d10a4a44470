// OutputPipeline with the real Qwen3 and gpt-oss tokenizers (scripts/fetch-assets.sh; skipped
// when absent): realistic outputs are encoded and fed back id by id and in random chunks; the
// reasoning / content / tool-call split must be exact and independent of the chunking. A fuzz
// feeds random id streams and checks for valid UTF-8 and, without parsing, equality with Decode.
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "router/output/output_pipeline.h"
#include "router/output/qwen3_reasoning_parser.h"
#include "router/output/token_text.h"

namespace xserv::router::output {
namespace {

using Ids = std::vector<uint32_t>;

const tokenizer::Tokenizer* Real(const std::string& name) {
  static auto* cache = new std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>>();
  auto it = cache->find(name);
  if (it != cache->end()) return it->second.get();
  const std::string dir = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/" + name;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    auto loaded = tokenizer::Tokenizer::FromFile(dir);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (loaded.ok()) tok = std::move(*loaded);
  }
  const tokenizer::Tokenizer* result = tok.get();
  (*cache)[name] = std::move(tok);
  return result;
}

#define REQUIRE_TOKENIZER(var, name)                                                  \
  const tokenizer::Tokenizer* var = Real(name);                                       \
  if (var == nullptr) GTEST_SKIP() << name << " not found under .assets/tokenizers; " \
                                          "run scripts/fetch-assets.sh"

// Feeds `ids` in chunks of random sizes (chunk 1 when seed is 0) and accumulates the output,
// checking every delta is valid UTF-8.
OutputText FeedChunked(const tokenizer::Tokenizer& tok, const OutputPipelineParams& params,
                       const Ids& ids, uint32_t seed) {
  auto created = OutputPipeline::Create(tok, params);
  EXPECT_TRUE(created.ok()) << created.status();
  OutputPipeline pipeline = std::move(*created);
  std::mt19937 rng(seed);
  OutputText text;
  for (size_t pos = 0; pos < ids.size();) {
    const size_t n = seed == 0 ? 1 : std::min(ids.size() - pos, 1 + rng() % 5);
    OutputDelta delta = pipeline.Step(std::span<const uint32_t>(ids).subspan(pos, n));
    EXPECT_TRUE(tokenizer::IsValidUtf8(delta.content));
    EXPECT_TRUE(tokenizer::IsValidUtf8(delta.reasoning));
    text.Append(delta);
    pos += n;
  }
  text.Append(pipeline.Finish());
  return text;
}

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls = {};
};

void ExpectSplit(const tokenizer::Tokenizer& tok, const OutputPipelineParams& params,
                 const Ids& ids, const Expected& want) {
  for (uint32_t seed : {0u, 1u, 2u, 3u, 4u}) {
    OutputText got = FeedChunked(tok, params, ids, seed);
    EXPECT_EQ(got.reasoning, want.reasoning) << "seed " << seed;
    EXPECT_EQ(got.content, want.content) << "seed " << seed;
    ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << "seed " << seed;
    for (size_t i = 0; i < want.tool_calls.size(); ++i) {
      EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name);
      EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments);
    }
    if (params.stop.stop.empty()) {
      EXPECT_EQ(got.token_ids, ids);
    }
  }
}

const OutputPipelineParams kQwen3{.reasoning_format = ReasoningFormat::kQwen3};
const OutputPipelineParams kHarmony{.reasoning_format = ReasoningFormat::kHarmony};

TEST(RealOutputTest, Qwen3MarkersResolveToKnownIds) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  auto markers = Qwen3ReasoningParser::ResolveMarkers(*tok);
  ASSERT_TRUE(markers.ok()) << markers.status();
  EXPECT_EQ(markers->think_start_id, 151667u);
  EXPECT_EQ(markers->think_end_id, 151668u);
}

TEST(RealOutputTest, Qwen3ThinkingOn) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  Ids ids = tok->Encode("<think>\nLet me think.\n</think>\n\nThe answer is 4.<|im_end|>");
  ASSERT_EQ(ids.front(), 151667u);
  ExpectSplit(*tok, kQwen3, ids, {.reasoning = "Let me think.", .content = "The answer is 4."});
  // Multi-byte text on both sides, split across byte-level tokens.
  ids = tok->Encode("<think>\n用户问 2+2，答案是 4 🤔\n\n再检查一下。\n</think>\n\n答案是 **4** 😀");
  ExpectSplit(*tok, kQwen3, ids,
              {.reasoning = "用户问 2+2，答案是 4 🤔\n\n再检查一下。", .content = "答案是 **4** 😀"});
}

TEST(RealOutputTest, Qwen3ThinkingOff) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  // enable_thinking=false: the empty think block is in the prompt, the output is plain text.
  Ids ids = tok->Encode("The answer is 4.<|im_end|>");
  ExpectSplit(*tok, kQwen3, ids, {.reasoning = "", .content = "The answer is 4."});
  // Without a parser the tags are plain content (they are not special tokens).
  ids = tok->Encode("<think>\nx\n</think>\n\ny");
  ExpectSplit(*tok, {}, ids, {.reasoning = "", .content = "<think>\nx\n</think>\n\ny"});
}

TEST(RealOutputTest, Qwen3TruncatedThinking) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  Ids ids = tok->Encode("<think>\nStep 1: consider the problem. Step 2:");
  ExpectSplit(*tok, kQwen3, ids,
              {.reasoning = "Step 1: consider the problem. Step 2:", .content = ""});
}

TEST(RealOutputTest, Qwen3StopStringsApplyToContent) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  OutputPipelineParams params = kQwen3;
  params.stop.stop = {"answer", "答案"};
  Ids ids = tok->Encode("<think>\nThe answer needs care.\n</think>\n\nFinal answer: 4");
  ExpectSplit(*tok, params, ids, {.reasoning = "The answer needs care.", .content = "Final "});
  OutputText got = FeedChunked(*tok, params, ids, 0);
  EXPECT_EQ(got.stop_index, 0u);
  // The stop string completes inside a token: later ids are not consumed.
  EXPECT_LT(got.token_ids.size(), ids.size());
  params.stop.stop = {"答案"};
  ids = tok->Encode("好的，答案是 4");
  got = FeedChunked(*tok, params, ids, 0);
  EXPECT_EQ(got.content, "好的，");
  EXPECT_EQ(got.stop_string, "答案");
}

TEST(RealOutputTest, HarmonyAnalysisThenFinal) {
  REQUIRE_TOKENIZER(tok, "gpt-oss");
  Ids ids = tok->Encode(
      "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant"
      "<|channel|>final<|message|>2 + 2 = 4.<|return|>");
  ASSERT_EQ(ids.front(), 200005u);
  ASSERT_EQ(ids.back(), 200002u);
  ExpectSplit(*tok, kHarmony, ids, {.reasoning = "User asks 2+2. Simple.", .content = "2 + 2 = 4."});
  // Control tokens are special: the same split whether or not they are skipped.
  OutputPipelineParams keep = kHarmony;
  keep.skip_special_tokens = false;
  ExpectSplit(*tok, keep, ids, {.reasoning = "User asks 2+2. Simple.", .content = "2 + 2 = 4."});
}

TEST(RealOutputTest, HarmonyTruncatedAnalysis) {
  REQUIRE_TOKENIZER(tok, "gpt-oss");
  Ids ids = tok->Encode("<|channel|>analysis<|message|>We need to think about naïve ünïcode");
  ExpectSplit(*tok, kHarmony, ids,
              {.reasoning = "We need to think about naïve ünïcode", .content = ""});
}

TEST(RealOutputTest, HarmonyToolCall) {
  REQUIRE_TOKENIZER(tok, "gpt-oss");
  Ids ids = tok->Encode(
      "<|channel|>analysis<|message|>Need weather for Tokyo.<|end|><|start|>assistant"
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"location\":\"Tokyo\",\"unit\":\"°C\"}<|call|>");
  ExpectSplit(*tok, kHarmony, ids,
              {.reasoning = "Need weather for Tokyo.",
               .content = "",
               .tool_calls = {{.name = "get_weather",
                               .arguments = "{\"location\":\"Tokyo\",\"unit\":\"°C\"}"}}});
}

TEST(RealOutputTest, TokenText) {
  REQUIRE_TOKENIZER(tok, "qwen3");
  Ids ids = tok->Encode(" hello");
  ASSERT_EQ(ids.size(), 1u);
  TokenText hello = RenderTokenText(*tok, ids[0]);
  EXPECT_EQ(hello.text, " hello");
  EXPECT_EQ(hello.bytes, " hello");
  TokenText think = RenderTokenText(*tok, 151667);
  EXPECT_EQ(think.text, "<think>");
  // A rare character is split over byte tokens: each token's bytes concatenate to the UTF-8.
  ids = tok->Encode("𝔘");
  std::string bytes;
  for (uint32_t id : ids) {
    TokenText part = RenderTokenText(*tok, id);
    EXPECT_TRUE(tokenizer::IsValidUtf8(part.text));
    bytes += part.bytes;
  }
  EXPECT_EQ(bytes, "𝔘");
}

TEST(RealOutputTest, FuzzRandomIds) {
  std::mt19937 rng(7);
  for (const char* name : {"qwen3", "gpt-oss"}) {
    const tokenizer::Tokenizer* tok = Real(name);
    if (tok == nullptr) continue;
    const uint32_t first_added = tok->added_tokens().front().id;
    for (int trial = 0; trial < 2000; ++trial) {
      Ids ids;
      const int length = static_cast<int>(rng() % 80);
      for (int k = 0; k < length; ++k) {
        const uint32_t pick = rng() % 8;
        // Mostly ordinary ids, some added/special ones, some out of range.
        ids.push_back(pick < 5   ? rng() % first_added
                      : pick < 7 ? first_added + rng() % (tok->vocab_size() - first_added)
                                 : tok->vocab_size() + rng() % 1000);
      }
      OutputPipelineParams params{
          .skip_special_tokens = (trial % 2) == 0,
          .stop = {.stop = (trial % 3) == 0 ? std::vector<std::string>{}
                                            : std::vector<std::string>{"the", "。", "\n\n"}},
          .reasoning_format = (trial % 5) == 0 ? ReasoningFormat::kNone
                              : std::string(name) == "qwen3" ? ReasoningFormat::kQwen3
                                                             : ReasoningFormat::kHarmony};
      OutputText one = FeedChunked(*tok, params, ids, 0);
      OutputText chunked = FeedChunked(*tok, params, ids, 100 + trial);
      EXPECT_EQ(one.reasoning, chunked.reasoning);
      EXPECT_EQ(one.content, chunked.content);
      EXPECT_EQ(one.token_ids, chunked.token_ids);
      for (const ToolCall& call : chunked.tool_calls) {
        EXPECT_TRUE(tokenizer::IsValidUtf8(call.name));
        EXPECT_TRUE(tokenizer::IsValidUtf8(call.arguments));
      }
      if (params.reasoning_format == ReasoningFormat::kNone && params.stop.stop.empty()) {
        EXPECT_EQ(one.content, tok->Decode(ids, params.skip_special_tokens));
      }
    }
  }
}

}  // namespace
}  // namespace xserv::router::output
