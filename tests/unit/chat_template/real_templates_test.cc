// The four real chat templates (tests/data/chat_templates/) rendered through the chat front end.
// Expected prompts were derived by reading each template and confirmed with jinja2 in
// transformers' environment.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/chat_template/chat_template.h"

namespace xserv::chat_template {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(XSERV_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplate Load(const std::string& name) {
  Json tokens = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  auto ct = ChatTemplate::FromString(ReadTemplate(name), tokens);
  EXPECT_TRUE(ct.ok()) << ct.status();
  return *std::move(ct);
}

RenderOptions Jan2nd2025() {
  RenderOptions options;
  options.now = [] {
    std::tm tm{};
    tm.tm_year = 125;
    tm.tm_mon = 0;
    tm.tm_mday = 2;
    return tm;
  };
  return options;
}

std::string MustRender(const ChatTemplate& ct, const ChatRenderRequest& req) {
  auto out = ct.Render(req, Jan2nd2025());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

const Json kWeatherTool = Json::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "description": "Get weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "description": "City name"},
                 "days": {"type": "integer"}}, "required": ["city"]}}}])");

TEST(Qwen3TemplateTest, ThinkingDisabledAddsEmptyThinkBlock) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}])");
  req.add_generation_prompt = true;
  req.kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(MustRender(Load("qwen3.jinja"), req),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  req.kwargs = Json::object();
  EXPECT_EQ(MustRender(Load("qwen3.jinja"), req),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(Qwen3TemplateTest, EarlierReasoningIsDropped) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
      {"role": "user", "content": "3+3?"}])");
  req.add_generation_prompt = true;
  EXPECT_EQ(MustRender(Load("qwen3.jinja"), req),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Qwen3TemplateTest, ToolsAndToolCalls) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "20C"}])");
  req.tools = kWeatherTool;
  req.add_generation_prompt = true;
  EXPECT_EQ(
      MustRender(Load("qwen3.jinja"), req),
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
      "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": "
      "\"Get weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\", \"description\": \"City name\"}, \"days\": {\"type\": \"integer\"}}, "
      "\"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with "
      "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
      "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n20C\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n");
}

TEST(Qwen3OldTemplateTest, FinalTurnKeepsReasoning) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello", "reasoning_content": "greet"}])");
  EXPECT_EQ(MustRender(Load("qwen3-old.jinja"), req),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\ngreet\n</think>\n\n"
            "Hello<|im_end|>\n");
}

TEST(Qwen3OldTemplateTest, ListContentIsAnError) {
  // The original release calls .startswith on content, which fails for a list of parts.
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])");
  EXPECT_FALSE(Load("qwen3-old.jinja").Render(req).ok());
  req.flatten_text_content = true;
  EXPECT_EQ(MustRender(Load("qwen3-old.jinja"), req), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(GptOssTemplateTest, SystemBecomesDeveloperAndDateComesFromClock) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}])");
  req.add_generation_prompt = true;
  req.kwargs = {{"reasoning_effort", "low"}};
  EXPECT_EQ(MustRender(Load("gpt-oss.jinja"), req),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
            "\nKnowledge cutoff: 2024-06\nCurrent date: 2025-01-02\n\nReasoning: low\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every "
            "message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
            "<|start|>user<|message|>Hi<|end|><|start|>assistant");
}

TEST(GptOssTemplateTest, ToolNamespaceAndToolCall) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "thinking": "Need tool.", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "content": "20C"}])");
  req.tools = kWeatherTool;
  req.add_generation_prompt = true;
  EXPECT_EQ(
      MustRender(Load("gpt-oss.jinja"), req),
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2025-01-02\n\nReasoning: medium\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message."
      "\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
      "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
      "// Get weather\ntype get_weather = (_: {\n// City name\ncity: string,\ndays?: number,\n"
      "}) => any;\n\n} // namespace functions<|end|><|start|>user<|message|>Weather?<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Need tool.<|end|>"
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
      "\"{\\\"city\\\":\\\"Paris\\\"}\"<|call|><|start|>functions.get_weather to=assistant"
      "<|channel|>commentary<|message|>\"20C\"<|end|><|start|>assistant");
}

TEST(GptOssTemplateTest, ChannelTagsInContentRaise) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": "<|channel|>analysis<|message|>x"}])");
  auto out = Load("gpt-oss.jinja").Render(req, Jan2nd2025());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("<|channel|> tags in the content field"),
            std::string::npos);
}

TEST(Llama3TemplateTest, BosOnFirstMessageAndTrimmedContent) {
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "system", "content": "Sys"},
                                 {"role": "user", "content": " Hi \n"}])");
  req.add_generation_prompt = true;
  EXPECT_EQ(MustRender(Load("llama3.jinja"), req),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ConcurrencyTest, OneParsedTemplateRendersFromManyThreads) {
  const ChatTemplate ct = Load("gpt-oss.jinja");
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "Weather?"}])");
  req.tools = kWeatherTool;
  req.add_generation_prompt = true;
  const std::string expected = MustRender(ct, req);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto out = ct.Render(req, Jan2nd2025());
        if (!out.ok() || *out != expected) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace xserv::chat_template
