// xserv-chat driven through a pipe (not a terminal: no colours, no prompts) against a served CPU
// model: each answer is followed by its token counts, history grows the prompt, /clear shrinks
// it, unknown commands are refused; with the server gone, turns report an error and the client
// keeps going.
#include <cstdio>
#include <random>
#include <regex>

#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"

namespace xserv::testing {
namespace {

std::string RunWithInput(const std::string& command, const std::string& input, int* code) {
  const std::string in_file = MakeTempDir() + "/input.txt";
  FILE* f = fopen(in_file.c_str(), "w");
  fwrite(input.data(), 1, input.size(), f);
  fclose(f);
  std::string out;
  FILE* pipe = popen((command + " < " + in_file + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::vector<int> PromptTokenCounts(const std::string& out) {
  std::vector<int> counts;
  const std::regex stats(R"(\[(\d+) prompt tokens, (\d+) generated)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), stats); it != std::sregex_iterator();
       ++it) {
    counts.push_back(std::stoi((*it)[1]));
    EXPECT_EQ(std::stoi((*it)[2]), 6);
  }
  return counts;
}

TEST(ChatCli, MultiTurnCommandsAndErrors) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model)) << supervisor.Log();
  const std::string chat = BinaryPath("xserv-chat") + " --url http://127.0.0.1:" +
                           std::to_string(supervisor.port()) +
                           " --max-tokens 6 --temperature 0 --log-level warn";
  int code = -1;
  const std::string out =
      RunWithInput(chat, "Hello there\nAnd a second turn\n/clear\nHi\n/bogus\n/exit\nnever\n",
                   &code);
  EXPECT_EQ(code, 0) << out;
  const std::vector<int> prompts = PromptTokenCounts(out);
  ASSERT_EQ(prompts.size(), 3u) << out;      // "never" comes after /exit
  EXPECT_GT(prompts[1], prompts[0]) << out;  // the second turn carries the first
  EXPECT_LT(prompts[2], prompts[1]) << out;  // /clear forgot it
  EXPECT_NE(out.find("[history cleared]"), std::string::npos) << out;
  EXPECT_NE(out.find("[unknown command"), std::string::npos) << out;
  EXPECT_EQ(out.find("\033["), std::string::npos) << "colours on a pipe";

  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(30)), 0);
  const std::string down = RunWithInput(chat, "Hello\nStill there?\n", &code);
  EXPECT_EQ(code, 0) << down;
  size_t errors = 0;
  for (size_t pos = 0; (pos = down.find("[error:", pos)) != std::string::npos; ++pos) ++errors;
  EXPECT_EQ(errors, 2u) << down;
}

}  // namespace
}  // namespace xserv::testing
