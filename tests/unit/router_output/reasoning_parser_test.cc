// Reasoning parsers on hand-made (id, text) streams: fake marker ids, no tokenizer needed.
#include "router/output/reasoning_parser.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "router/output/harmony_parser.h"
#include "router/output/qwen3_reasoning_parser.h"

namespace xserv::router::output {
namespace {

constexpr uint32_t kText = 1000;  // any non-marker id
constexpr uint32_t kThink = 1;
constexpr uint32_t kEndThink = 2;

using Stream = std::vector<std::pair<uint32_t, std::string>>;

struct Parsed {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> calls;  // merged per index
};

Parsed RunParser(ReasoningParser& parser, const Stream& stream, const std::string& tail = "") {
  Parsed parsed;
  auto take = [&](ParsedDelta& delta) {
    parsed.reasoning += delta.reasoning;
    parsed.content += delta.content;
    for (ToolCallDelta& call : delta.tool_calls) {
      if (!call.name.empty()) {
        EXPECT_EQ(call.index, static_cast<int>(parsed.calls.size()));
        parsed.calls.push_back(call);
      } else {
        EXPECT_LT(call.index, static_cast<int>(parsed.calls.size()));
        parsed.calls[call.index].arguments += call.arguments;
      }
    }
  };
  for (const auto& [id, text] : stream) {
    ParsedDelta delta;
    parser.Feed(id, text, &delta);
    take(delta);
  }
  ParsedDelta delta;
  parser.Finish(tail, &delta);
  take(delta);
  return parsed;
}

Qwen3ReasoningParser MakeQwen3(bool starts_in_reasoning = false) {
  return Qwen3ReasoningParser(
      Qwen3ReasoningParser::Markers{.think_start_id = kThink, .think_end_id = kEndThink},
      starts_in_reasoning);
}

TEST(Qwen3ReasoningParserTest, ThinkingThenAnswer) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kThink, ""},
                               {kText, "\n"},
                               {kText, "Let me"},
                               {kText, " think.\n\nMore.\n"},
                               {kEndThink, ""},
                               {kText, "\n\n"},
                               {kText, "The answer"},
                               {kText, " is 4."}});
  EXPECT_EQ(parsed.reasoning, "Let me think.\n\nMore.");
  EXPECT_EQ(parsed.content, "The answer is 4.");
}

TEST(Qwen3ReasoningParserTest, WhitespaceBeforeThinkIsDropped) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kText, "\n "}, {kThink, ""}, {kText, "r"}, {kEndThink, ""},
                               {kText, "c"}});
  EXPECT_EQ(parsed.reasoning, "r");
  EXPECT_EQ(parsed.content, "c");
}

TEST(Qwen3ReasoningParserTest, NoThinkBlockIsAllContent) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kText, "\n"}, {kText, "\nHello"}, {kText, " there\n"}});
  EXPECT_EQ(parsed.reasoning, "");
  EXPECT_EQ(parsed.content, "\n\nHello there\n");
  Qwen3ReasoningParser blank = MakeQwen3();
  EXPECT_EQ(RunParser(blank, {{kText, " \n"}}).content, " \n");
}

TEST(Qwen3ReasoningParserTest, TruncatedThinkingIsAllReasoning) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kThink, ""}, {kText, "\nStill"}, {kText, " thinking\n"}});
  EXPECT_EQ(parsed.reasoning, "Still thinking\n");
  EXPECT_EQ(parsed.content, "");
}

TEST(Qwen3ReasoningParserTest, PromptOpenedThinkBlock) {
  Qwen3ReasoningParser parser = MakeQwen3(/*starts_in_reasoning=*/true);
  Parsed parsed = RunParser(parser, {{kText, "Hmm.\n"}, {kEndThink, ""}, {kText, "\n\nDone."}});
  EXPECT_EQ(parsed.reasoning, "Hmm.");
  EXPECT_EQ(parsed.content, "Done.");
  // A leading </think> without <think> (the prompt opened the block) also closes reasoning.
  Qwen3ReasoningParser closing = MakeQwen3();
  parsed = RunParser(closing, {{kEndThink, ""}, {kText, "\n\nDone."}});
  EXPECT_EQ(parsed.reasoning, "");
  EXPECT_EQ(parsed.content, "Done.");
}

TEST(Qwen3ReasoningParserTest, StrayMarkersStayAsText) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kText, "Use "}, {kThink, ""}, {kText, " and "}, {kEndThink, ""}});
  EXPECT_EQ(parsed.content, "Use <think> and </think>");
  Qwen3ReasoningParser inner = MakeQwen3();
  parsed = RunParser(inner, {{kThink, ""}, {kText, "a"}, {kThink, ""}, {kEndThink, ""}, {kText, "b"}});
  EXPECT_EQ(parsed.reasoning, "a<think>");
  EXPECT_EQ(parsed.content, "b");
}

TEST(Qwen3ReasoningParserTest, TextFlushedWithMarkerGoesFirst) {
  Qwen3ReasoningParser parser = MakeQwen3();
  Parsed parsed = RunParser(parser, {{kThink, ""}, {kText, "a"}, {kEndThink, "\xEF\xBF\xBD"},
                               {kText, "b"}}, "tail");
  EXPECT_EQ(parsed.reasoning, "a\xEF\xBF\xBD");
  EXPECT_EQ(parsed.content, "btail");
}

// Harmony with fake ids.
constexpr HarmonyParser::Markers kHarmony{.start = 10, .channel = 11, .constrain = 12,
                                          .message = 13, .end = 14, .call = 15, .return_ = 16};

TEST(HarmonyParserTest, AnalysisThenFinal) {
  HarmonyParser parser(kHarmony);
  Parsed parsed = RunParser(parser, {{11, ""}, {kText, "analysis"}, {13, ""}, {kText, "User asks"},
                               {kText, " 2+2."}, {14, ""}, {10, ""}, {kText, "assistant"},
                               {11, ""}, {kText, "final"}, {13, ""}, {kText, "4"}, {16, ""},
                               {kText, "ignored"}});
  EXPECT_EQ(parsed.reasoning, "User asks 2+2.");
  EXPECT_EQ(parsed.content, "4");
  EXPECT_TRUE(parsed.calls.empty());
}

TEST(HarmonyParserTest, TruncatedAnalysis) {
  HarmonyParser parser(kHarmony);
  Parsed parsed = RunParser(parser, {{11, ""}, {kText, "analysis"}, {13, ""}, {kText, "Thinking"}});
  EXPECT_EQ(parsed.reasoning, "Thinking");
  EXPECT_EQ(parsed.content, "");
}

TEST(HarmonyParserTest, ToolCallsInChannelAndRoleHeaders) {
  HarmonyParser parser(kHarmony);
  Parsed parsed = RunParser(
      parser, {{11, ""}, {kText, "analysis"}, {13, ""}, {kText, "Need weather."}, {14, ""},
               {10, ""}, {kText, "assistant"}, {11, ""}, {kText, "commentary to=functions.get"},
               {kText, "_weather "}, {12, ""}, {kText, "json"}, {13, ""}, {kText, "{\"city\":"},
               {kText, "\"Paris\"}"}, {15, ""},
               // Recipient in the role part, bare content type after the channel.
               {10, ""}, {kText, "assistant to=functions.lookup"}, {11, ""},
               {kText, "commentary json"}, {13, ""}, {kText, "{}"}, {15, ""}});
  EXPECT_EQ(parsed.reasoning, "Need weather.");
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(parsed.calls[1].name, "lookup");
  EXPECT_EQ(parsed.calls[1].arguments, "{}");
}

TEST(HarmonyParserTest, PreambleIsContentAndStrayTextIsDropped) {
  HarmonyParser parser(kHarmony);
  Parsed parsed = RunParser(parser, {{11, ""}, {kText, "commentary"}, {13, ""}, {kText, "Checking."},
                               {14, ""}, {kText, "junk"}, {11, ""}, {kText, "final"}, {13, ""},
                               {kText, "Done"}, {13, ""}, {kText, "!"}});
  EXPECT_EQ(parsed.content, "Checking.Done!");
}

TEST(HarmonyParserTest, HugeHeaderIsBounded) {
  HarmonyParser parser(kHarmony);
  Stream stream = {{11, ""}};
  for (int i = 0; i < 1000; ++i) stream.push_back({kText, "analysis "});
  stream.push_back({13, ""});
  stream.push_back({kText, "x"});
  Parsed parsed = RunParser(parser, stream);
  EXPECT_EQ(parsed.reasoning, "x");
}

TEST(ReasoningFormatTest, Names) {
  EXPECT_EQ(*ParseReasoningFormat("qwen3"), ReasoningFormat::kQwen3);
  EXPECT_EQ(*ParseReasoningFormat("GPT_OSS"), ReasoningFormat::kHarmony);
  EXPECT_EQ(*ParseReasoningFormat("none"), ReasoningFormat::kNone);
  EXPECT_FALSE(ParseReasoningFormat("bogus").ok());
  EXPECT_EQ(ReasoningFormatForModelType("qwen3_moe"), ReasoningFormat::kQwen3);
  EXPECT_EQ(ReasoningFormatForModelType("gpt_oss"), ReasoningFormat::kHarmony);
  EXPECT_EQ(ReasoningFormatForModelType("llama"), ReasoningFormat::kNone);
  EXPECT_EQ(ReasoningFormatName(ReasoningFormat::kHarmony), "harmony");
}

}  // namespace
}  // namespace xserv::router::output
