// xserv-perplexity against a served CPU model equals the same sliding-window sum computed with
// xserv-score (the in-process scorer) on the same token ids: the tool's windowing, request
// format and aggregation are right end to end. Also: a server that is down is a clean error.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"
#include "tools/perplexity/perplexity.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(PerplexityCli, EqualsTheInProcessScorer) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  const std::string text_file = SourcePath(".assets/text/moby-dick.txt");
  if (model.empty() || !std::filesystem::exists(text_file)) {
    GTEST_SKIP() << "assets not fetched (scripts/fetch-assets.sh)";
  }
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model)) << supervisor.Log();
  const int port = supervisor.port();
  constexpr int64_t kTokens = 300, kLength = 64, kStride = 24;
  int code = -1;
  const std::string out =
      RunCommand(BinaryPath("xserv-perplexity") + " --url http://127.0.0.1:" + std::to_string(port) +
              " --file " + text_file + " --max-length " + std::to_string(kLength) +
              " --stride " + std::to_string(kStride) + " --max-tokens " +
              std::to_string(kTokens) + " --log-level warn",
          &code);
  ASSERT_EQ(code, 0) << out;
  const json got = json::parse(out);
  EXPECT_EQ(got["tokens"], kTokens);
  EXPECT_EQ(got["tokens_scored"], kTokens - 1);

  // The reference: the same ids (the server's tokenizer), each window scored in-process.
  std::ifstream in(text_file);
  std::stringstream text;
  text << in.rdbuf();
  HttpResult tokenized = Post(port, "/tokenize", json{{"prompt", text.str()}});
  ASSERT_EQ(tokenized.status, 200);
  std::vector<int64_t> ids = tokenized.Json()["tokens"].get<std::vector<int64_t>>();
  ids.resize(kTokens);
  auto windows = tools::SlidingWindows(kTokens, kLength, kStride);
  ASSERT_TRUE(windows.ok());
  const std::string requests = MakeTempDir() + "/requests.jsonl";
  {
    std::ofstream req(requests);
    for (const tools::ScoreWindow& w : *windows) {
      req << json{{"ids", std::vector<int64_t>(ids.begin() + w.begin, ids.begin() + w.end)}}.dump()
          << "\n";
    }
  }
  const std::string scored = RunCommand(BinaryPath("xserv-score") + " --model " + model +
                                     " --top-k 0 --log-level warn < " + requests,
                                 &code);
  ASSERT_EQ(code, 0) << scored;
  std::istringstream lines(scored);
  tools::PerplexityResult expected;
  for (const tools::ScoreWindow& w : *windows) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    const json reply = json::parse(line);
    std::vector<double> lps;
    for (const json& v : reply["logprobs"]) lps.push_back(v.is_null() ? 0.0 : v.get<double>());
    ASSERT_TRUE(tools::AddWindow(w, lps, expected).ok());
  }
  EXPECT_NEAR(got["perplexity"].get<double>(), expected.perplexity(),
              1e-4 * expected.perplexity());
  EXPECT_GT(expected.perplexity(), 1.0);
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(30)), 0);

  // Nobody listening any more: a clear error and exit code 1, no hang.
  const std::string down = RunCommand(BinaryPath("xserv-perplexity") + " --url http://127.0.0.1:" +
                                   std::to_string(port) + " --file " + text_file + " 2>&1",
                               &code);
  EXPECT_EQ(code, 1) << down;
  EXPECT_NE(down.find("UNAVAILABLE"), std::string::npos) << down;
}

}  // namespace
}  // namespace xserv::testing
