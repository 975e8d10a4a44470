// A short run of xserv-router-load (50 streams; the benchmark uses 2,000): the program starts its
// own fake-worker + router stack, every stream completes with the scripted token count, the
// streams overlap, and the reported latencies respect the worker's scripted lower bounds.
#include <fstream>

#include "gtest/gtest.h"
#include "tests/integration/fake_stack.h"

namespace xserv::testing {
namespace {

using nlohmann::json;

TEST(RouterLoadSmoke, FiftyStreamsCompleteAndOverlap) {
  const std::string model = MakeTokenizerOnlyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  constexpr int kStreams = 50;
  constexpr int kTokens = 16;
  constexpr int kIntervalUs = 10000;
  const std::string out = MakeTempDir() + "/load.json";
  const std::string cmd = BinaryPath("xserv-router-load") + " --model " + model + " --streams " +
                          std::to_string(kStreams) + " --max-tokens " + std::to_string(kTokens) +
                          " --token-interval-us " + std::to_string(kIntervalUs) +
                          " --deadline-s 60 --json-out " + out + " > " + out + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(out + ".log");
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  ASSERT_EQ(status, 0) << text;
  std::ifstream in(out);
  const json report = json::parse(in, nullptr, false);
  ASSERT_TRUE(report.is_object()) << text;
  const json& m = report["metrics"];
  EXPECT_EQ(m["completed"], kStreams) << text;
  EXPECT_EQ(m["failed"], 0);
  EXPECT_EQ(m["completion_tokens"], kStreams * kTokens);
  EXPECT_GE(m["peak_concurrent_streams"].get<int>(), kStreams / 2) << "streams did not overlap";
  // The router can only add time to the worker's schedule.
  EXPECT_GE(m["first_content"]["p50_ms"].get<double>(), kIntervalUs / 1000.0);
  EXPECT_GE(m["total"]["p50_ms"].get<double>(), kTokens * kIntervalUs / 1000.0);
  EXPECT_FALSE(report["commit"].get<std::string>().empty());
  EXPECT_FALSE(report["hardware"]["cpu"].get<std::string>().empty());
}

}  // namespace
}  // namespace xserv::testing
