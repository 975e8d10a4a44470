// xserv-bench against a served CPU model: every request completes with exactly the asked output
// length, the latencies are positive and ordered, the JSON has the results schema, closed and
// open loop, with the SVG chart; against a server that is down it fails fast with exit code 1.
// Text prompts cut from Moby-Dick with random lengths, warm-up requests kept out of the metrics,
// goodput under SLOs, without ignore_eos, and the same benchmark over the public gRPC API.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"

namespace xserv::testing {
namespace {

int RunBenchAt(const std::string& url, const std::string& out, const std::string& log,
               const std::string& load, const std::string& extra) {
  // 24-token prompts and 12-token answers unless `extra` sets lengths.
  const std::string lengths =
      extra.find("--input-len") == std::string::npos ? " --input-len 24 --output-len 12" : "";
  const std::string command = BinaryPath("xserv-bench") + " --url " + url + " " + load + lengths +
                              " --requests 6 --out " +
                              out + " " + extra + " --log-level warn > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int RunBench(int port, const std::string& out, const std::string& log,
             const std::string& load = "--concurrency 1,3", const std::string& extra = "") {
  return RunBenchAt("http://127.0.0.1:" + std::to_string(port), out, log, load, extra);
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

// Requests the router has finished (its E2E latency histogram's count).
int RouterRequestCount(int port) {
  const std::string body = HttpCall(port, "GET", "/metrics").body;
  const std::string key = "xserv:e2e_request_latency_seconds_count ";
  const size_t pos = body.find(key);
  return pos == std::string::npos ? -1 : std::stoi(body.substr(pos + key.size()));
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST(BenchCli, TextWorkloadWarmupGoodputAndGrpc) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  const std::string text = SourcePath(".assets/text/moby-dick.txt");
  if (model.empty() || !std::filesystem::exists(text)) {
    GTEST_SKIP() << "Qwen3 tokenizer or Moby-Dick not fetched (scripts/fetch-assets.sh)";
  }
  ChildProcess supervisor;
  int grpc_port = 0;
  ASSERT_TRUE(StartSmallStackWithGrpc(supervisor, model, &grpc_port)) << supervisor.Log();
  const std::string dir = MakeTempDir();

  // Text prompts of 16..48 tokens (about), outputs of 4..12 tokens, three warm-up requests that
  // the server serves but the metrics leave out, and an SLO every request meets.
  const int served_before = RouterRequestCount(supervisor.port());
  ASSERT_GE(served_before, 0);
  const std::string text_flags = "--dataset text --text-file " + text +
                                 " --input-len 32 --output-len 8 --random-range-ratio 0.5"
                                 " --warmup 3 --slo-ttft-ms 600000 --slo-tpot-ms 600000";
  ASSERT_EQ(RunBench(supervisor.port(), dir + "/text.json", dir + "/log", "--concurrency 2",
                     text_flags),
            0);
  EXPECT_EQ(RouterRequestCount(supervisor.port()) - served_before, 3 + 6);
  const nlohmann::json r = ReadJson(dir + "/text.json");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["config"]["dataset"], "text");
  EXPECT_EQ(r["config"]["warmup"], 3);
  const double chars_per_token = r["config"]["chars_per_token"].get<double>();
  EXPECT_GT(chars_per_token, 1.5);  // calibrated through /tokenize, not the default guess
  EXPECT_LT(chars_per_token, 8.0);
  EXPECT_NE(chars_per_token, 4.0);
  const nlohmann::json& m = r["metrics"][0];
  EXPECT_EQ(m["requests"], 6);
  EXPECT_EQ(m["completed"], 6);
  EXPECT_GE(m["output_tokens"].get<int>(), 6 * 4);
  EXPECT_LE(m["output_tokens"].get<int>(), 6 * 12);
  EXPECT_GE(m["prompt_tokens"].get<int>(), 6 * 8);  // cut by bytes, counted by the server
  EXPECT_LE(m["prompt_tokens"].get<int>(), 6 * 72);
  EXPECT_EQ(m["good"], 6);
  EXPECT_DOUBLE_EQ(m["goodput_req_s"].get<double>(), m["request_s"].get<double>());

  // The public gRPC API: exact lengths through ignore_eos, and an SLO nobody meets.
  ASSERT_EQ(RunBenchAt("127.0.0.1:" + std::to_string(grpc_port), dir + "/grpc.json",
                       dir + "/log2", "--concurrency 1,2", "--backend grpc --slo-tpot-ms 0.000001"),
            0);
  const nlohmann::json g = ReadJson(dir + "/grpc.json");
  ASSERT_TRUE(g.is_object());
  EXPECT_EQ(g["config"]["backend"], "grpc");
  ASSERT_EQ(g["metrics"].size(), 2u);
  for (const nlohmann::json& level : g["metrics"]) {
    EXPECT_EQ(level["completed"], 6);
    EXPECT_EQ(level["output_tokens"], 6 * 12);
    EXPECT_EQ(level["prompt_tokens"], 6 * 24);
    EXPECT_GT(level["ttft_ms_p50"].get<double>(), 0.0);
    EXPECT_GT(level["tpot_ms_p50"].get<double>(), 0.0);
    EXPECT_GT(level["itl_ms_p50"].get<double>(), 0.0);
    EXPECT_LE(level["ttft_ms_p99"].get<double>(), level["e2e_ms_p99"].get<double>());
    EXPECT_EQ(level["good"], 0);
    EXPECT_EQ(level["goodput_req_s"], 0.0);
  }

  // Without ignore_eos the outputs may end early, never late.
  ASSERT_EQ(RunBench(supervisor.port(), dir + "/eos.json", dir + "/log3", "--concurrency 2",
                     "--no-ignore-eos"),
            0);
  const nlohmann::json e = ReadJson(dir + "/eos.json");
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["config"]["ignore_eos"], false);
  EXPECT_EQ(e["metrics"][0]["completed"], 6);
  EXPECT_LE(e["metrics"][0]["output_tokens"].get<int>(), 6 * 12);

  // A gRPC target that is not there fails the warm-up with exit code 1.
  EXPECT_EQ(RunBenchAt("127.0.0.1:1", dir + "/none.json", dir + "/log4", "--concurrency 1",
                       "--backend grpc --timeout-s 5"),
            1);
  EXPECT_EQ(supervisor.Stop(SIGTERM, std::chrono::seconds(30)), 0);
}

}  // namespace
}  // namespace xserv::testing
