// OutputPipeline on a small byte-level tokenizer (ids 0..255 are the bytes): stop strings across
// token boundaries, skip_special_tokens, UTF-8 hold-back, reasoning + stop interplay, token text,
// and a fuzz over random id streams.
#include "router/output/output_pipeline.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "router/output/token_text.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace xserv::router::output {
namespace {

using tokenizer::testing::AddedTokenJson;
using tokenizer::testing::BpeJson;
using tokenizer::testing::ByteLevelVocab;
using tokenizer::testing::Ids;
using tokenizer::testing::Json;

constexpr uint32_t kXxEn = 256;   // "xxEN"
constexpr uint32_t kDyy = 257;    // "Dyy"
constexpr uint32_t kImEnd = 300;  // "<|im_end|>", special
constexpr uint32_t kThink = 301;  // "<think>", not special
constexpr uint32_t kEndThink = 302;

const tokenizer::Tokenizer& Tok() {
  static const tokenizer::Tokenizer* tok = [] {
    Json j = BpeJson(ByteLevelVocab({"xxEN", "Dyy"}), {});
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                          {"use_regex", false}};
    j["decoder"] = {{"type", "ByteLevel"}};
    j["added_tokens"] = Json::array({AddedTokenJson(kImEnd, "<|im_end|>", true),
                                     AddedTokenJson(kThink, "<think>", false),
                                     AddedTokenJson(kEndThink, "</think>", false)});
    auto loaded = tokenizer::Tokenizer::FromJson(j.dump());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  return *tok;
}

Ids Bytes(const std::string& s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

OutputPipeline Make(OutputPipelineParams params) {
  auto pipeline = OutputPipeline::Create(Tok(), std::move(params));
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  return std::move(*pipeline);
}

// Feeds ids one at a time; returns every per-step content delta and the whole output.
OutputText FeedEach(OutputPipeline& pipeline, const Ids& ids, std::vector<std::string>* deltas) {
  OutputText text;
  for (uint32_t id : ids) {
    OutputDelta delta = pipeline.Step(id);
    if (deltas != nullptr) deltas->push_back(delta.content);
    text.Append(delta);
  }
  text.Append(pipeline.Finish());
  return text;
}

TEST(OutputPipelineTest, StopStringOneTokenPerCharacter) {
  OutputPipeline pipeline = Make({.stop = {.stop = {"END"}}});
  Ids ids = Bytes("abEND");
  ids.push_back('z');
  std::vector<std::string> deltas;
  OutputText text = FeedEach(pipeline, ids, &deltas);
  EXPECT_EQ(text.content, "ab");
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "b", "", "", "", ""}));
  EXPECT_EQ(text.stop_index, 0u);
  EXPECT_EQ(text.stop_string, "END");
  EXPECT_EQ(text.token_ids, Bytes("abEND"));  // 'z' is not consumed
  EXPECT_EQ(pipeline.num_tokens(), 5u);
}

TEST(OutputPipelineTest, StopStringAcrossMultiCharacterTokens) {
  OutputPipeline pipeline = Make({.stop = {.stop = {"END"}}});
  OutputDelta first = pipeline.Step(kXxEn);
  EXPECT_EQ(first.content, "xx");  // "EN" held back
  OutputDelta second = pipeline.Step(kDyy);
  EXPECT_EQ(second.content, "");
  EXPECT_EQ(second.stop_index, 0u);
  EXPECT_TRUE(second.finished);
  EXPECT_TRUE(pipeline.Finish().content.empty());

  OutputPipeline include = Make({.stop = {.stop = {"END"}, .include_stop_str_in_output = true}});
  OutputText text;
  text.Append(include.Step(Ids{kXxEn, kDyy, 'q'}));
  EXPECT_EQ(text.content, "xxEND");
  EXPECT_EQ(text.token_ids, (Ids{kXxEn, kDyy}));
}

TEST(OutputPipelineTest, HeldBackTextIsReleasedAtFinish) {
  OutputPipeline pipeline = Make({.stop = {.stop = {"END"}}});
  OutputDelta delta = pipeline.Step(kXxEn);
  EXPECT_EQ(delta.content, "xx");
  OutputDelta last = pipeline.Finish();
  EXPECT_EQ(last.content, "EN");
  EXPECT_TRUE(last.finished);
  EXPECT_FALSE(last.stop_index.has_value());
  EXPECT_TRUE(pipeline.Step('a').token_ids.empty());
}

TEST(OutputPipelineTest, SkipSpecialTokens) {
  Ids ids = Bytes("hi");
  ids.push_back(kImEnd);
  OutputPipeline skip = Make({});
  EXPECT_EQ(FeedEach(skip, ids, nullptr).content, "hi");
  OutputPipeline keep = Make({.skip_special_tokens = false});
  EXPECT_EQ(FeedEach(keep, ids, nullptr).content, "hi<|im_end|>");
}

// The id a generation ends on (a stop token, or EOS) is consumed and counted, but its text stays
// out unless include_stop_str_in_output, as vLLM's detokenizer does for stop-terminated requests;
// an id not listed is text as usual.
TEST(OutputPipelineTest, AFinalTokensTextIsLeftOut) {
  Ids ids = Bytes("hi");
  ids.push_back(kImEnd);
  OutputPipeline keep = Make({.skip_special_tokens = false, .final_token_ids = {kImEnd}});
  const OutputText kept = FeedEach(keep, ids, nullptr);
  EXPECT_EQ(kept.content, "hi");
  EXPECT_EQ(kept.token_ids, ids);
  EXPECT_EQ(keep.num_tokens(), ids.size());
  OutputPipeline include = Make({.skip_special_tokens = false,
                                 .stop = {.include_stop_str_in_output = true},
                                 .final_token_ids = {kImEnd}});
  EXPECT_EQ(FeedEach(include, ids, nullptr).content, "hi<|im_end|>");
  // An ordinary token as the stop token: "i" ends "hi" and is not shown.
  OutputPipeline plain = Make({.final_token_ids = {'i'}});
  EXPECT_EQ(FeedEach(plain, Bytes("hi"), nullptr).content, "h");
  OutputPipeline other = Make({.final_token_ids = {'x'}});
  EXPECT_EQ(FeedEach(other, Bytes("hi"), nullptr).content, "hi");
}

// min_tokens (vLLM): no stop string ends the output before that many ids; the first "hi" here
// completes at the 2nd id, the second at the 4th.
TEST(OutputPipelineTest, StopStringsWaitForMinTokens) {
  OutputPipeline early = Make({.stop = {.stop = {"hi"}}});
  const OutputText first = FeedEach(early, Bytes("hihi"), nullptr);
  EXPECT_EQ(first.content, "");
  EXPECT_EQ(early.num_tokens(), 2u);
  OutputPipeline late = Make({.stop = {.stop = {"hi"}}, .min_tokens = 3});
  const OutputText second = FeedEach(late, Bytes("hihi"), nullptr);
  EXPECT_EQ(second.content, "hi");
  EXPECT_EQ(second.stop_index, 0u);
  EXPECT_EQ(late.num_tokens(), 4u);
}

TEST(OutputPipelineTest, MultiByteCharacterWaitsForItsLastByte) {
  OutputPipeline pipeline = Make({});
  std::vector<std::string> deltas;
  OutputText text = FeedEach(pipeline, Bytes("a\xE5\xA5\xBD"), &deltas);
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "", "", "\xE5\xA5\xBD"}));
  // Truncated inside a character: Finish gives U+FFFD, never broken bytes.
  OutputPipeline cut = Make({});
  text = FeedEach(cut, Bytes("a\xE5\xA5"), nullptr);
  EXPECT_EQ(text.content, "a\xEF\xBF\xBD");
}

TEST(OutputPipelineTest, ReasoningWithStopStringsOnContentOnly) {
  OutputPipeline pipeline =
      Make({.stop = {.stop = {"STOP"}}, .reasoning_format = ReasoningFormat::kQwen3});
  Ids ids = {kThink};
  for (uint32_t id : Bytes("\nno STOP here\n")) ids.push_back(id);
  ids.push_back(kEndThink);
  for (uint32_t id : Bytes("\n\nAnswer STOP tail")) ids.push_back(id);
  OutputText text = FeedEach(pipeline, ids, nullptr);
  EXPECT_EQ(text.reasoning, "no STOP here");
  EXPECT_EQ(text.content, "Answer ");
  EXPECT_EQ(text.stop_string, "STOP");
}

TEST(OutputPipelineTest, MarkerFlushesPendingPartialCharacter) {
  OutputPipeline pipeline = Make({.reasoning_format = ReasoningFormat::kQwen3});
  OutputText text = FeedEach(pipeline, Ids{kThink, 'a', 0xE5, kEndThink, 'b'}, nullptr);
  // Same as decoding: the cut character becomes U+FFFD before the marker.
  EXPECT_EQ(text.reasoning, "a\xEF\xBF\xBD");
  EXPECT_EQ(text.content, "b");
}

TEST(OutputPipelineTest, CreateRejectsBadParams) {
  EXPECT_EQ(OutputPipeline::Create(Tok(), {.stop = {.stop = {""}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // This tokenizer has no harmony control tokens.
  EXPECT_EQ(OutputPipeline::Create(Tok(), {.reasoning_format = ReasoningFormat::kHarmony})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TokenTextTest, RendersTextAndBytes) {
  TokenText a = RenderTokenText(Tok(), 'a');
  EXPECT_EQ(a.text, "a");
  EXPECT_EQ(a.bytes, "a");
  TokenText partial = RenderTokenText(Tok(), 0xE5);
  EXPECT_EQ(partial.text, "\xEF\xBF\xBD");
  EXPECT_EQ(partial.bytes, "\xE5");
  TokenText space = RenderTokenText(Tok(), ' ');
  EXPECT_EQ(space.text, " ");
  EXPECT_EQ(space.bytes, " ");
  TokenText special = RenderTokenText(Tok(), kImEnd);
  EXPECT_EQ(special.text, "<|im_end|>");
  EXPECT_EQ(special.bytes, "<|im_end|>");
  TokenText unknown = RenderTokenText(Tok(), 999999);
  EXPECT_TRUE(unknown.text.empty());
  EXPECT_TRUE(unknown.bytes.empty());
}

TEST(OutputPipelineTest, FuzzRandomIdsStayValidUtf8AndChunkingInvariant) {
  std::mt19937 rng(42);
  const std::vector<std::string> stops = {"EN", "\xE5\xA5\xBD", "aa"};
  for (int trial = 0; trial < 400; ++trial) {
    Ids ids;
    const int length = static_cast<int>(rng() % 64);
    for (int k = 0; k < length; ++k) {
      const uint32_t pick = rng() % 10;
      ids.push_back(pick < 7 ? rng() % 256 : (pick < 9 ? 300 + rng() % 3 : 256 + rng() % 50));
    }
    OutputPipelineParams params{
        .skip_special_tokens = (trial % 2) == 0,
        .stop = {.stop = (trial % 3) == 0 ? std::vector<std::string>{} : stops},
        .reasoning_format = (trial % 4) < 2 ? ReasoningFormat::kQwen3 : ReasoningFormat::kNone};
    OutputPipeline whole = Make(params);
    OutputText want;
    want.Append(whole.Step(ids));
    want.Append(whole.Finish());
    OutputPipeline chunked = Make(params);
    OutputText got;
    for (size_t pos = 0; pos < ids.size();) {
      const size_t n = std::min(ids.size() - pos, static_cast<size_t>(rng() % 4));
      OutputDelta delta = chunked.Step(std::span<const uint32_t>(ids).subspan(pos, n));
      ASSERT_TRUE(tokenizer::IsValidUtf8(delta.content));
      ASSERT_TRUE(tokenizer::IsValidUtf8(delta.reasoning));
      got.Append(delta);
      pos += n;
    }
    got.Append(chunked.Finish());
    EXPECT_EQ(got.content, want.content);
    EXPECT_EQ(got.reasoning, want.reasoning);
    EXPECT_EQ(got.token_ids, want.token_ids);
    if (params.reasoning_format == ReasoningFormat::kNone && params.stop.stop.empty()) {
      EXPECT_EQ(got.content, Tok().Decode(ids, params.skip_special_tokens));
    }
  }
}

}  // namespace
}  // namespace xserv::router::output
