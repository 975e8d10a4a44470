// Reasoning split end to end: xserv-router over xserv-fake-worker scripted with the ids a real
// model would generate (encoded with the real Qwen3 / gpt-oss tokenizers), checked through
// /v1/chat/completions, non-streaming and streaming: Qwen3 <think> blocks and gpt-oss harmony
// analysis channels become reasoning_content, the rest content; thinking off gives only content.
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/integration/fake_stack.h"
#include "tests/integration/http_client.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

struct Split {
  std::string reasoning;
  std::string content;
  std::string finish_reason;
  bool has_reasoning_field = false;
};

json ChatBody(bool stream, bool enable_thinking = true) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "What is 2+2?"}}})},
               {"max_tokens", 200}};
  if (stream) body["stream"] = true;
  if (!enable_thinking) body["chat_template_kwargs"] = {{"enable_thinking", false}};
  return body;
}

Split NonStreaming(int port, const json& body) {
  const HttpResult r = Post(port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  Split s;
  if (!j.contains("choices") || j["choices"].size() != 1) {
    ADD_FAILURE() << r.body;
    return s;
  }
  const json& message = j["choices"][0]["message"];
  s.has_reasoning_field = message.contains("reasoning_content") &&
                          !message["reasoning_content"].is_null();
  if (s.has_reasoning_field) s.reasoning = message["reasoning_content"];
  if (message["content"].is_string()) s.content = message["content"];
  s.finish_reason = j["choices"][0]["finish_reason"];
  return s;
}

// Concatenates the streamed deltas; checks the SSE framing on the way.
Split Streaming(int port, const json& body) {
  const HttpResult r = Post(port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  const std::vector<std::string> events = r.SseData();
  Split s;
  if (events.empty() || events.back() != "[DONE]") {
    ADD_FAILURE() << "no [DONE]: " << r.body;
    return s;
  }
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i], nullptr, false);
    if (!chunk.is_object() || chunk.contains("error") || chunk["choices"].size() != 1) {
      ADD_FAILURE() << "unexpected event: " << events[i];
      continue;
    }
    const json& choice = chunk["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("reasoning_content")) {
      s.has_reasoning_field = true;
      s.reasoning += delta["reasoning_content"].get<std::string>();
    }
    if (delta.contains("content") && delta["content"].is_string()) {
      s.content += delta["content"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) s.finish_reason = choice["finish_reason"];
  }
  return s;
}

class ReasoningTest : public ::testing::Test {
 protected:
  // Starts a stack whose worker answers every request with the ids of `script`, encoded with the
  // fetched tokenizer `tokenizer`; `eos` are the EOS token strings the worker reports in Info.
  void Start(const std::string& tokenizer, const std::string& model_type,
             const std::string& chat_template, const std::string& script,
             const std::vector<std::string>& eos) {
    model_ = MakeTokenizerOnlyModel(tokenizer, model_type, chat_template);
    if (model_.empty()) GTEST_SKIP() << tokenizer << " tokenizer not fetched (scripts/fetch-assets.sh)";
    auto tok = tokenizer::Tokenizer::FromFile(model_ + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    script_ids_ = (*tok)->Encode(script);
    std::vector<uint32_t> eos_ids;
    for (const std::string& e : eos) {
      const auto id = (*tok)->TokenToId(e);
      ASSERT_TRUE(id.has_value()) << e;
      eos_ids.push_back(*id);
    }
    ASSERT_TRUE(StartFakeStack(stack_, model_,
                               {"--script-ids", JoinIds(script_ids_), "--eos-ids", JoinIds(eos_ids),
                                "--model-type", model_type,
                                "--vocab-size", std::to_string((*tok)->vocab_size())}));
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << stack_.Logs().substr(0, 8000);
  }
  int port() const { return stack_.port(); }

  std::string model_;
  std::vector<uint32_t> script_ids_;
  FakeStack stack_;
};

constexpr char kQwen3Thinking[] =
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.<|im_end|>";

TEST_F(ReasoningTest, Qwen3ThinkBlockBecomesReasoningContent) {
  Start("qwen3", "qwen3", "", kQwen3Thinking, {"<|im_end|>", "<|endoftext|>"});
  if (IsSkipped() || HasFatalFailure()) return;
  const Split whole = NonStreaming(port(), ChatBody(false));
  EXPECT_EQ(whole.reasoning, "Let me think.");
  EXPECT_EQ(whole.content, "The answer is 4.");
  EXPECT_EQ(whole.finish_reason, "stop");
  const Split streamed = Streaming(port(), ChatBody(true));
  EXPECT_EQ(streamed.reasoning, "Let me think.");
  EXPECT_EQ(streamed.content, "The answer is 4.");
  EXPECT_EQ(streamed.finish_reason, "stop");
  // Usage counts every scripted id, the EOS included (as vLLM does).
  const json j = Post(port(), "/v1/chat/completions", ChatBody(false)).Json();
  EXPECT_EQ(j["usage"]["completion_tokens"], script_ids_.size());
}

TEST_F(ReasoningTest, Qwen3ThinkingOffIsAllContent) {
  Start("qwen3", "qwen3", "", "The answer is 4.<|im_end|>", {"<|im_end|>", "<|endoftext|>"});
  if (IsSkipped() || HasFatalFailure()) return;
  for (bool stream : {false, true}) {
    const json body = ChatBody(stream, /*enable_thinking=*/false);
    const Split s = stream ? Streaming(port(), body) : NonStreaming(port(), body);
    EXPECT_FALSE(s.has_reasoning_field) << "stream=" << stream << " reasoning: " << s.reasoning;
    EXPECT_EQ(s.content, "The answer is 4.") << "stream=" << stream;
    EXPECT_EQ(s.finish_reason, "stop") << "stream=" << stream;
  }
}

TEST_F(ReasoningTest, Qwen3LengthCutInsideThinkIsAllReasoning) {
  Start("qwen3", "qwen3", "", kQwen3Thinking, {"<|im_end|>", "<|endoftext|>"});
  if (IsSkipped() || HasFatalFailure()) return;
  json body = ChatBody(false);
  body["max_tokens"] = 3;  // "<think>", "\n", "Let": cut before "</think>"
  const Split s = NonStreaming(port(), body);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.reasoning, "Let");
}

TEST_F(ReasoningTest, GptOssAnalysisChannelBecomesReasoningContent) {
  Start("gpt-oss", "gpt_oss", "tests/data/chat_templates/gpt-oss.jinja",
        "<|channel|>analysis<|message|>Thinking.<|end|><|start|>assistant<|channel|>final"
        "<|message|>Hello!<|return|>",
        {"<|return|>", "<|call|>", "<|endoftext|>"});
  if (IsSkipped() || HasFatalFailure()) return;
  const Split whole = NonStreaming(port(), ChatBody(false));
  EXPECT_EQ(whole.reasoning, "Thinking.");
  EXPECT_EQ(whole.content, "Hello!");
  EXPECT_EQ(whole.finish_reason, "stop");
  const Split streamed = Streaming(port(), ChatBody(true));
  EXPECT_EQ(streamed.reasoning, "Thinking.");
  EXPECT_EQ(streamed.content, "Hello!");
  EXPECT_EQ(streamed.finish_reason, "stop");
}

TEST_F(ReasoningTest, GptOssFinalOnlyIsAllContent) {
  Start("gpt-oss", "gpt_oss", "tests/data/chat_templates/gpt-oss.jinja",
        "<|channel|>final<|message|>Hello!<|return|>", {"<|return|>", "<|call|>", "<|endoftext|>"});
  if (IsSkipped() || HasFatalFailure()) return;
  for (bool stream : {false, true}) {
    const Split s = stream ? Streaming(port(), ChatBody(true)) : NonStreaming(port(), ChatBody(false));
    EXPECT_FALSE(s.has_reasoning_field) << "stream=" << stream;
    EXPECT_EQ(s.content, "Hello!") << "stream=" << stream;
    EXPECT_EQ(s.finish_reason, "stop") << "stream=" << stream;
  }
}

}  // namespace
}  // namespace xserv::testing
