// One end-to-end run of the xserv-score binary: JSON lines in, one reply per line out, a bad line
// in the middle does not stop the stream; an unknown backend is refused with a clear message;
// --dump-activations writes the first request's activations.
#include <sys/wait.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/safetensors/safetensors_file.h"
#include "nlohmann/json.hpp"
#include "tests/unit/tools/tools_test_util.h"

namespace xserv::tools {
namespace {

using Json = nlohmann::json;
using testing::ReadFileBytes;
using testing::ScratchDir;
using testing::TestModelDir;
using testing::WriteFileBytes;

// Runs xserv-score with `args`, stdin from `input`; returns the exit status.
int RunScore(const ScratchDir& tmp, const std::string& args, const std::string& input) {
  WriteFileBytes(tmp / "in.jsonl", input);
  const std::string command = std::string(XSERV_SCORE_BIN) + " " + args + " < " + (tmp / "in.jsonl") +
                              " > " + (tmp / "out.jsonl") + " 2> " + (tmp / "err.txt");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ScoreCliTest, ScoresLinesAndSurvivesABadOne) {
  ScratchDir tmp;
  const std::string args = "--model " + TestModelDir("qwen3-tiny") + " --top-k 2 --threads 1";
  ASSERT_EQ(RunScore(tmp, args, "{\"ids\": [1, 2, 3, 4]}\nnot json\n{\"ids\": [9, 8]}\n"), 0)
      << ReadFileBytes(tmp / "err.txt");
  std::istringstream out(ReadFileBytes(tmp / "out.jsonl"));
  std::vector<Json> replies;
  for (std::string line; std::getline(out, line);) replies.push_back(Json::parse(line));
  ASSERT_EQ(replies.size(), 3u);
  ASSERT_EQ(replies[0]["logprobs"].size(), 4u);
  EXPECT_TRUE(replies[0]["logprobs"][0].is_null());
  ASSERT_EQ(replies[0]["top"].size(), 4u);
  EXPECT_EQ(replies[0]["top"][0].size(), 2u);
  EXPECT_TRUE(replies[1].contains("error"));
  EXPECT_EQ(replies[2]["logprobs"].size(), 2u);
}

TEST(ScoreCliTest, UnknownBackendIsRefusedClearly) {
  ScratchDir tmp;
  EXPECT_EQ(RunScore(tmp, "--model " + TestModelDir("qwen3-tiny") + " --backend tpu", ""), 2);
  EXPECT_NE(ReadFileBytes(tmp / "err.txt").find("--backend \"tpu\" is not available"),
            std::string::npos)
      << ReadFileBytes(tmp / "err.txt");
}

TEST(ScoreCliTest, DumpsActivationsOfTheFirstRequest) {
  ScratchDir tmp;
  const std::string dump = tmp / "acts.safetensors";
  ASSERT_EQ(RunScore(tmp, "--model " + TestModelDir("qwen3-tiny") + " --dump-activations " + dump,
                     "{\"ids\": [1, 2, 3]}\n{\"ids\": [4, 5]}\n"),
            0)
      << ReadFileBytes(tmp / "err.txt");
  auto file = safetensors::SafetensorsFile::Open(dump);
  ASSERT_TRUE(file.ok()) << file.status();
  // Two layers x six points + final_norm, each [3 tokens, hidden 64] of the first request.
  EXPECT_EQ(file->num_tensors(), 13u);
  auto attn = file->Tensor("layers.1.attn_out");
  ASSERT_TRUE(attn.ok()) << attn.status();
  EXPECT_EQ(attn->shape, (std::vector<int64_t>{3, 64}));
}

}  // namespace
}  // namespace xserv::tools
