// xserv-bench's statistics: numpy-style percentiles and the per-level summary.
#include "tools/bench/bench_stats.h"

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

TEST(BenchStats, PercentilesInterpolateLikeNumpy) {
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5}, 90), 4.6);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5}, 100), 5.0);
}

TEST(BenchStats, SummaryCountsOnlyCompletedRequests) {
  RequestTiming a{.ok = true, .ttft_s = 0.1, .e2e_s = 1.1, .itl_s = {0.2, 0.3},
                  .output_tokens = 11, .prompt_tokens = 5};
  RequestTiming failed{.ok = false, .ttft_s = 9, .e2e_s = 9};
  const nlohmann::json m = Summarize({a, failed}, 2.0);
  EXPECT_EQ(m["requests"], 2);
  EXPECT_EQ(m["completed"], 1);
  EXPECT_EQ(m["failed"], 1);
  EXPECT_EQ(m["output_tokens"], 11);
  EXPECT_DOUBLE_EQ(m["output_tok_s"].get<double>(), 5.5);
  EXPECT_DOUBLE_EQ(m["ttft_ms_p50"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(m["tpot_ms_p50"].get<double>(), 100.0);  // (1.1 - 0.1) s / 10 tokens
  EXPECT_DOUBLE_EQ(m["itl_ms_p99"].get<double>(), 299.0);
  EXPECT_DOUBLE_EQ(m["e2e_ms_p90"].get<double>(), 1100.0);
}

TEST(BenchStats, GoodputCountsRequestsMeetingEverySlo) {
  // TTFT 100 ms, TPOT 50 ms; TTFT 300 ms, TPOT 50 ms; TTFT 100 ms, TPOT 200 ms; a failure.
  const RequestTiming fast{.ok = true, .ttft_s = 0.1, .e2e_s = 0.6, .output_tokens = 11};
  const RequestTiming slow_start{.ok = true, .ttft_s = 0.3, .e2e_s = 0.8, .output_tokens = 11};
  const RequestTiming slow_decode{.ok = true, .ttft_s = 0.1, .e2e_s = 2.1, .output_tokens = 11};
  const RequestTiming failed{.ok = false, .ttft_s = 0.01, .e2e_s = 0.02};
  const std::vector<RequestTiming> all = {fast, slow_start, slow_decode, failed};
  EXPECT_FALSE(Summarize(all, 2.0).contains("goodput_req_s"));
  const nlohmann::json both = Summarize(all, 2.0, Slo{.ttft_ms = 200, .tpot_ms = 100});
  EXPECT_EQ(both["good"], 1);
  EXPECT_DOUBLE_EQ(both["goodput_req_s"].get<double>(), 0.5);
  EXPECT_EQ(Summarize(all, 2.0, Slo{.ttft_ms = 200})["good"], 2);
  EXPECT_EQ(Summarize(all, 2.0, Slo{.tpot_ms = 100})["good"], 2);
  EXPECT_DOUBLE_EQ(Summarize(all, 1.0, Slo{.ttft_ms = 1000})["goodput_req_s"].get<double>(), 3.0);
  // A one-token answer has no decode time: only its TTFT counts.
  EXPECT_TRUE((Slo{.tpot_ms = 0.001}).Met({.ok = true, .ttft_s = 0.1, .e2e_s = 0.1,
                                           .output_tokens = 1}));
}

}  // namespace
}  // namespace xserv::tools
