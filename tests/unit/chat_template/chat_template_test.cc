// Chat front end: loading templates and special tokens from a model directory, template
// selection, and the variables a render sees.
#include "common/chat_template/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace xserv::chat_template {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

class ModelDir {
 public:
  ModelDir() {
    path_ = fs::temp_directory_path() / ("xserv_chat_template_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~ModelDir() { fs::remove_all(path_); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string RenderOrDie(const ChatTemplate& ct, const ChatRenderRequest& req) {
  auto out = ct.Render(req);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(ChatTemplateTest, LoadsStringTemplateAndAddedTokenObjects) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "pad_token": null, "additional_special_tokens": ["<x>"],
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}{{ additional_special_tokens }}"
  })");
  auto ct = ChatTemplate::FromModelDir(dir.path());
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ(ct->special_tokens().dump(),
            R"({"bos_token":"<s>","eos_token":"</s>","additional_special_tokens":["<x>"]})");
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(RenderOrDie(*ct, req), "<s>hi</s>['<x>']");
}

TEST(ChatTemplateTest, ChatTemplateJinjaFileWins) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "config"})");
  dir.Write("chat_template.jinja", "file {{ eos_token }}\n");
  auto ct = ChatTemplate::FromModelDir(dir.path());
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ(RenderOrDie(*ct, ChatRenderRequest()), "file </s>");
}

TEST(ChatTemplateTest, SpecialTokensMapFillsGaps) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}|{{ unk_token }}"})");
  dir.Write("special_tokens_map.json", R"({"bos_token": {"content": "<B>"}, "unk_token": "<U>"})");
  auto ct = ChatTemplate::FromModelDir(dir.path());
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ(RenderOrDie(*ct, ChatRenderRequest()), "<B>|<U>");
}

TEST(ChatTemplateTest, NamedTemplatesSelectToolUseWhenToolsGiven) {
  Json config = Json::parse(R"({"chat_template": [
    {"name": "default", "template": "default"},
    {"name": "tool_use", "template": "tools={{ tools|length }}"},
    {"name": "rag", "template": "rag"}]})");
  auto ct = ChatTemplate::FromTokenizerConfig(config);
  ASSERT_TRUE(ct.ok()) << ct.status();
  ChatRenderRequest req;
  EXPECT_EQ(RenderOrDie(*ct, req), "default");
  req.tools = Json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(RenderOrDie(*ct, req), "tools=1");
  req.template_name = "rag";
  EXPECT_EQ(RenderOrDie(*ct, req), "rag");
  req.template_name = "missing";
  EXPECT_FALSE(ct->Render(req).ok());
}

TEST(ChatTemplateTest, MissingOrBrokenTemplatesAreErrors) {
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(Json::object()).status().code(),
            absl::StatusCode::kNotFound);
  auto broken = ChatTemplate::FromTokenizerConfig(Json::parse(R"({"chat_template": "{% if %}"})"));
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(std::string(broken.status().message()).find("line 1"), std::string::npos);
  ModelDir dir;
  dir.Write("tokenizer_config.json", "{not json");
  EXPECT_FALSE(ChatTemplate::FromModelDir(dir.path()).ok());
}

TEST(ChatTemplateTest, VariablesMatchTransformers) {
  auto ct = ChatTemplate::FromString(
      "{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token }}|"
      "{{ enable_thinking }}|{{ messages|length }}",
      Json{{"bos_token", "<s>"}});
  ASSERT_TRUE(ct.ok()) << ct.status();
  ChatRenderRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(RenderOrDie(*ct, req), "None|None|False|<s>||1");
  req.add_generation_prompt = true;
  req.kwargs = {{"enable_thinking", false}, {"bos_token", "<override>"}};
  EXPECT_EQ(RenderOrDie(*ct, req), "None|None|True|<override>|False|1");
  req.kwargs = {{"messages", 1}};
  EXPECT_FALSE(ct->Render(req).ok());
}

TEST(ChatTemplateTest, ToolSchemaKeyOrderIsPreserved) {
  auto ct = ChatTemplate::FromString("{{ tools[0]|tojson }}");
  ASSERT_TRUE(ct.ok());
  ChatRenderRequest req;
  req.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "a": 1}}])");
  EXPECT_EQ(RenderOrDie(*ct, req), R"({"type": "function", "function": {"name": "f", "a": 1}})");
}

TEST(ChatTemplateTest, OptionalMessageNormalisation) {
  auto ct = ChatTemplate::FromString(
      "{% for m in messages %}{{ m.content }}|{% for c in m.tool_calls %}"
      "{{ c.function.arguments is mapping }}{% endfor %}{% endfor %}");
  ASSERT_TRUE(ct.ok());
  ChatRenderRequest req;
  req.messages = Json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": "", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}])");
  EXPECT_EQ(RenderOrDie(*ct, req),
            "[{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]||False");
  req.flatten_text_content = true;
  req.parse_tool_arguments = true;
  EXPECT_EQ(RenderOrDie(*ct, req), "a\nb||True");
}

// An assistant turn of tool calls comes back from OpenAI clients with "content": null (or none at
// all); templates that test `'</think>' in message.content` (Qwen3's) fail on None, so the serving
// normalisation makes it "" as vLLM does. Without it the template sees None.
TEST(ChatTemplateTest, NullContentBecomesEmptyWhenFlattened) {
  auto ct = ChatTemplate::FromString(
      "{% for m in messages %}[{{ 'x' in m.content }}:{{ m.content }}]{% endfor %}");
  ASSERT_TRUE(ct.ok());
  ChatRenderRequest req;
  req.messages = Json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": []},
    {"role": "assistant", "tool_calls": []}])");
  EXPECT_FALSE(ct->Render(req).ok());
  req.flatten_text_content = true;
  EXPECT_EQ(RenderOrDie(*ct, req), "[True:x][False:][False:]");
}

}  // namespace
}  // namespace xserv::chat_template
