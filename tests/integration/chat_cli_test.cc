// xserv-chat driven through a pipe (not a terminal: no colours, no prompts) against a served CPU
// model: each answer is followed by its token counts, history grows the prompt, /clear shrinks
// it, unknown commands are refused; with the server gone, turns report an error and the client
// keeps going. Over the public gRPC API (the conversation rendered in ChatML) the same first turn
// is the same prompt as the HTTP chat template's, and history and errors behave the same.
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

// (prompt tokens, generated tokens) of each answer.
std::vector<std::pair<int, int>> TokenCounts(const std::string& out) {
  std::vector<std::pair<int, int>> counts;
  const std::regex stats(R"(\[(\d+) prompt tokens, (\d+) generated, [0-9.]+ tok/s\])");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), stats); it != std::sregex_iterator();
       ++it) {
    counts.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  }
  return counts;
}

TEST(ChatCli, GrpcBackendRendersChatMl) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  int grpc_port = 0;
  ASSERT_TRUE(StartSmallStackWithGrpc(supervisor, model, &grpc_port)) << supervisor.Log();
  const std::string flags = " --max-tokens 6 --temperature 0 --log-level warn";
  const std::string http_chat = BinaryPath("xserv-chat") + " --url http://127.0.0.1:" +
                                std::to_string(supervisor.port()) + flags;
  const std::string grpc_chat = BinaryPath("xserv-chat") + " --backend grpc --url 127.0.0.1:" +
                                std::to_string(grpc_port) + flags;
  int code = -1;
  const auto http = TokenCounts(RunWithInput(http_chat, "Hello there\n", &code));
  EXPECT_EQ(code, 0);
  const std::string out = RunWithInput(
      grpc_chat, "Hello there\nAnd a second turn\n/clear\nHello there\n/exit\n", &code);
  EXPECT_EQ(code, 0) << out;
  const auto grpc = TokenCounts(out);
  ASSERT_EQ(http.size(), 1u);
  ASSERT_EQ(grpc.size(), 3u) << out;
  EXPECT_EQ(grpc[0].first, http[0].first) << out;  // ChatML == Qwen3's template for one turn
  EXPECT_GT(grpc[1].first, grpc[0].first) << out;  // the second turn carries the first
  EXPECT_EQ(grpc[2].first, grpc[0].first) << out;  // /clear forgot it
  for (const auto& [prompt, generated] : grpc) {
    EXPECT_GE(generated, 1) << out;
    EXPECT_LE(generated, 6) << out;
  }
  EXPECT_EQ(out.find("\033["), std::string::npos) << "colours on a pipe";

  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(30)), 0);
  const std::string down = RunWithInput(grpc_chat + " --timeout-s 5", "Hello\n", &code);
  EXPECT_EQ(code, 0) << down;
  EXPECT_NE(down.find("[error:"), std::string::npos) << down;
}

}  // namespace
}  // namespace xserv::testing
