// The router with the official OpenAI Node SDK (tests/integration/openai_sdk_check.cjs) against a
// real CPU worker: the API must work unchanged with the SDK.
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/integration/process.h"

namespace xserv::testing {
namespace {

TEST(OpenAiSdk, ChatCompletionsStreamingModelsAndErrors) {
  const std::string sdk = SourcePath(".assets/node/openai");
  const std::string tokenizer = SourcePath(".assets/tokenizers/qwen3");
  if (!std::filesystem::exists(sdk + "/package.json") ||
      !std::filesystem::exists(tokenizer + "/tokenizer.json") || std::system("node --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs node and scripts/fetch-assets.sh";
  }
  const std::string model = MakeTempDir() + "/qwen3-tiny";
  ASSERT_EQ(std::system((BinaryPath("xserv-make-model") + " --arch qwen3 --preset tiny --seed 5 "
                         "--tokenizer " + tokenizer + " --out " + model + " --log-level warn")
                            .c_str()),
            0);
  ChildProcess worker, router;
  ASSERT_TRUE(worker.StartServer("xserv-worker", {"--model", model, "--kv-cache-memory", "0.25",
                                                  "--swap-space-gb", "0"}));
  ASSERT_TRUE(router.StartServer("xserv-router", {"--model", model, "--workers", worker.address()}))
      << router.Log();
  const std::string cmd = "node " + SourcePath("tests/integration/openai_sdk_check.cjs") + " " +
                          sdk + " http://127.0.0.1:" + std::to_string(router.port()) + "/v1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << router.Log().substr(0, 4000);
  EXPECT_EQ(router.Stop(), 0);
  EXPECT_EQ(worker.Stop(), 0);
}

}  // namespace
}  // namespace xserv::testing
