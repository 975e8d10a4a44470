// xserv-bench against a served CPU model: every request completes with exactly the asked output
// length, the latencies are positive and ordered, the JSON has the results schema, closed and
// open loop, with the SVG chart; against a server that is down it fails fast with exit code 1.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"

namespace xserv::testing {
namespace {

int RunBench(int port, const std::string& out, const std::string& log,
             const std::string& load = "--concurrency 1,3", const std::string& extra = "") {
  const std::string command = BinaryPath("xserv-bench") + " --url http://127.0.0.1:" +
                              std::to_string(port) + " " + load +
                              " --requests 6 --input-len 24 --output-len 12 --warmup 1 --out " +
                              out + " " + extra + " --log-level warn > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(BenchCli, SweepCompletesWithExactLengths) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess supervisor;
  ASSERT_TRUE(StartSmallStack(supervisor, model)) << supervisor.Log();
  const std::string dir = MakeTempDir();
  ASSERT_EQ(RunBench(supervisor.port(), dir + "/r.json", dir + "/log"), 0);
  const nlohmann::json r = nlohmann::json::parse(std::ifstream(dir + "/r.json"));
  EXPECT_EQ(r["tool"], "xserv-bench");
  EXPECT_EQ(r["config"]["output_len"], 12);
  ASSERT_EQ(r["metrics"].size(), 2u);
  for (const nlohmann::json& m : r["metrics"]) {
    EXPECT_EQ(m["completed"], 6);
    EXPECT_EQ(m["output_tokens"], 6 * 12);
    EXPECT_EQ(m["prompt_tokens"], 6 * 24);
    EXPECT_GT(m["ttft_ms_p50"].get<double>(), 0.0);
    EXPECT_GT(m["tpot_ms_p50"].get<double>(), 0.0);
    EXPECT_LE(m["ttft_ms_p50"].get<double>(), m["e2e_ms_p50"].get<double>());
    EXPECT_GT(m["output_tok_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(r["metrics"][1]["concurrency"], 3);

  // Open loop: Poisson arrivals at two rates, and the chart of the sweep.
  ASSERT_EQ(RunBench(supervisor.port(), dir + "/open.json", dir + "/log3", "--request-rate 20,50",
                     "--svg " + dir + "/chart.svg"),
            0);
  const nlohmann::json open = nlohmann::json::parse(std::ifstream(dir + "/open.json"));
  EXPECT_EQ(open["config"]["mode"], "open-loop-poisson");
  ASSERT_EQ(open["metrics"].size(), 2u);
  EXPECT_EQ(open["metrics"][0]["completed"], 6);
  EXPECT_EQ(open["metrics"][1]["request_rate"], 50.0);
  std::stringstream svg;
  svg << std::ifstream(dir + "/chart.svg").rdbuf();
  EXPECT_EQ(svg.str().rfind("<svg", 0), 0u);
  size_t circles = 0;
  for (size_t pos = 0; (pos = svg.str().find("<circle", pos)) != std::string::npos; ++pos) ++circles;
  EXPECT_EQ(circles, 2u);
  const int port = supervisor.port();
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_EQ(RunBench(port, dir + "/r2.json", dir + "/log2"), 1);
}

}  // namespace
}  // namespace xserv::testing
