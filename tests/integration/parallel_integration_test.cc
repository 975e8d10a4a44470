// Tensor and pipeline parallelism across worker processes, through the whole stack on the CPU
// backend: xserv-supervisor --tp T --pp P starts T*P worker ranks that meet over Gloo
// (rendezvous through the leader's Rendezvous RPC) and the router. Greedy tokens must equal a
// single rank's and logprobs agree within fp32 tolerance (different summation order only), for
// Qwen3 and gpt-oss with 5 layers (so PP=3 splits unevenly, 2+2+1). kill -9 of a peer rank takes
// the replica down (an in-flight request gets a clean error) and the supervisor brings it back
// (recovery time recorded); SIGTERM drains an in-flight request across the ranks.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/integration/hostile_http.h"
#include "tests/integration/http_client.h"
#include "tests/integration/process.h"
#include "tests/integration/stack_util.h"

namespace xserv::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Completion {
  std::vector<std::string> tokens;
  std::vector<double> logprobs;
};

class Stack {
 public:
  // Starts supervisor + router + tp*pp worker ranks serving `model`.
  bool Start(const std::string& model, int tp, int pp = 1, std::vector<std::string> extra = {}) {
    const int worker_port = FreePortRun(tp * pp);
    std::vector<std::string> args = {
        "--model", model, "--tp", std::to_string(tp), "--pp", std::to_string(pp),
        "--worker-base-port",
        std::to_string(worker_port), "--grace-period-s", "20", "--worker-arg=--kv-cache-memory",
        "--worker-arg=0.0625", "--worker-arg=--threads", "--worker-arg=1"};
    // No swap pool unless `extra` asks for one (a flag given twice is an error).
    if (std::none_of(extra.begin(), extra.end(), [](const std::string& a) {
          return a.rfind("--worker-arg=--swap-space-gb", 0) == 0;
        })) {
      args.insert(args.end(), {"--worker-arg=--swap-space-gb", "--worker-arg=0"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    // XSERV_TEST_SUPERVISOR_ARGS (space-separated) runs the same tests on other backends, e.g.
    // "--backend cuda --devices 0,1" on the two-GPU host.
    if (const char* more = std::getenv("XSERV_TEST_SUPERVISOR_ARGS"); more != nullptr) {
      std::istringstream words(more);
      for (std::string word; words >> word;) args.push_back(word);
    }
    return supervisor_.StartServer("xserv-supervisor", args, std::chrono::seconds(120));
  }

  // A counter or gauge of the router's /metrics (xserv:<name>); -1 when absent.
  double Metric(const std::string& name) {
    const std::string body = HttpCall(supervisor_.port(), "GET", "/metrics").body;
    const std::string key = "\nxserv:" + name + " ";
    const size_t at = body.find(key);
    if (at == std::string::npos) return -1;
    return std::stod(body.substr(at + key.size()));
  }

  // Greedy completion of token ids with the logprob of every generated token.
  std::optional<Completion> Complete(const std::vector<int>& prompt, int max_tokens) {
    HttpResult r = Post(supervisor_.port(), "/v1/completions",
                        json{{"prompt", prompt},
                             {"max_tokens", max_tokens},
                             {"temperature", 0},
                             {"ignore_eos", true},
                             {"logprobs", 1},
                             {"return_tokens_as_token_ids", true}});
    if (r.status != 200) {
      ADD_FAILURE() << r.status << " " << r.body;
      return std::nullopt;
    }
    const json lp = r.Json()["choices"][0]["logprobs"];
    Completion c;
    for (const json& t : lp["tokens"]) c.tokens.push_back(t.get<std::string>());
    for (const json& v : lp["token_logprobs"]) c.logprobs.push_back(v.get<double>());
    return c;
  }

  ChildProcess& supervisor() { return supervisor_; }

 private:
  ChildProcess supervisor_;
};

std::vector<std::vector<int>> Prompts() {
  std::mt19937 rng(11);
  std::vector<std::vector<int>> prompts;
  for (int len : {1, 5, 17, 40}) {
    std::vector<int> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<int>(100 + rng() % 20000));
    prompts.push_back(p);
  }
  return prompts;
}

std::vector<Completion> RunAll(const std::string& model, int tp, int pp = 1) {
  Stack stack;
  if (!stack.Start(model, tp, pp)) {
    ADD_FAILURE() << "tp=" << tp << " pp=" << pp << " did not start\n"
                  << stack.supervisor().Log();
    return {};
  }
  std::vector<Completion> out;
  for (const auto& prompt : Prompts()) {
    auto c = stack.Complete(prompt, 12);
    if (!c) return {};
    out.push_back(*c);
  }
  EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
      << stack.supervisor().Log();
  return out;
}

// Every prompt of Prompts() at once (so a pipelined leader has requests to split between its
// steps in flight), `max_tokens` each; empty on any failure.
std::vector<Completion> CompleteConcurrently(Stack& stack, int max_tokens) {
  std::vector<std::future<std::optional<Completion>>> futures;
  for (const auto& prompt : Prompts()) {
    futures.push_back(std::async(std::launch::async, [&stack, prompt, max_tokens] {
      return stack.Complete(prompt, max_tokens);
    }));
  }
  std::vector<Completion> out;
  for (auto& f : futures) {
    std::optional<Completion> c = f.get();
    if (!c) return {};
    out.push_back(*c);
  }
  return out;
}

void ExpectSameGreedy(const std::vector<Completion>& base, const std::vector<Completion>& tp,
                      const std::string& what) {
  ASSERT_EQ(base.size(), tp.size()) << what;
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(base[i].tokens, tp[i].tokens) << what << " prompt " << i;
    ASSERT_EQ(base[i].logprobs.size(), tp[i].logprobs.size()) << what;
    for (size_t j = 0; j < base[i].logprobs.size(); ++j) {
      EXPECT_NEAR(base[i].logprobs[j], tp[i].logprobs[j], 1e-3) << what << " prompt " << i
                                                                << " token " << j;
    }
  }
}

// Every layout of one architecture against the single rank.
void ExpectLayoutsMatch(const std::string& arch, const std::string& tokenizer,
                        const std::vector<std::pair<int, int>>& layouts) {
  const std::string model = MakeTinyModel(arch, tokenizer, /*seed=*/3, /*num_layers=*/5);
  if (model.empty()) GTEST_SKIP() << tokenizer << " tokenizer not fetched (scripts/fetch-assets.sh)";
  const std::vector<Completion> base = RunAll(model, 1, 1);
  ASSERT_FALSE(base.empty());
  for (const auto& [tp, pp] : layouts) {
    ExpectSameGreedy(base, RunAll(model, tp, pp),
                     arch + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp));
  }
}

// TP=4 replicates the tiny model's 2 KV heads; PP=3 splits 5 layers 2+2+1, PP=4 2+1+1+1. The
// 4-rank layouts are issue 14's topologies, here on the CPU backend.
TEST(Parallel, Qwen3LayoutsMatchSingleRank) {
  ExpectLayoutsMatch("qwen3", "qwen3", {{2, 1}, {4, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 2}});
}

// TP=4 splits the experts' intermediate columns over four ranks.
TEST(Parallel, GptOssLayoutsMatchSingleRank) {
  ExpectLayoutsMatch("gpt-oss", "gpt-oss", {{2, 1}, {4, 1}, {1, 2}, {1, 3}, {2, 2}});
}

// --window-kv-blocks (gpt-oss's sliding layers keep only their window's blocks, in storage shared
// with the full layers): the tokens of every layout equal one rank's with plain tables, over
// sequences of up to 80 tokens against the tiny model's window of 32, with 4 requests at once;
// also in a pool so small (16 blocks of 16) that requests are preempted, by recomputation and,
// with a host pool, by swapping both tables' blocks out and back. `auto` turns the tables on
// once prefix caching is off.
TEST(Parallel, GptOssWindowKvBlocksMatchFullTables) {
  const std::string model = MakeTinyModel("gpt-oss", "gpt-oss", /*seed=*/3, /*num_layers=*/5);
  if (model.empty()) GTEST_SKIP() << "gpt-oss tokenizer not fetched (scripts/fetch-assets.sh)";
  constexpr int kTokens = 40;
  constexpr const char* kOnLine = "sliding-window layers keep their window's blocks";
  struct Run {
    std::vector<Completion> out;
    bool window_tables = false;  // the worker said so in its log
    double preemptions = -1;
  };
  const auto run = [&](int tp, int pp, std::vector<std::string> extra) {
    extra.insert(extra.begin(), "--worker-arg=--enable-prefix-caching=false");
    Run r;
    Stack stack;
    if (!stack.Start(model, tp, pp, extra)) {
      ADD_FAILURE() << "tp=" << tp << " pp=" << pp << " did not start\n"
                    << stack.supervisor().Log();
      return r;
    }
    r.out = CompleteConcurrently(stack, kTokens);
    // The router refreshes worker counters every 200 ms.
    for (int i = 0; i < 20 && r.preemptions <= 0; ++i) {
      r.preemptions = stack.Metric("num_preemptions_total");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
        << stack.supervisor().Log();
    r.window_tables = stack.supervisor().Log().find(kOnLine) != std::string::npos;
    return r;
  };
  const Run base = run(1, 1, {"--worker-arg=--window-kv-blocks=off"});
  ASSERT_EQ(base.out.size(), Prompts().size());
  EXPECT_FALSE(base.window_tables);
  const std::string on = "--worker-arg=--window-kv-blocks=on";
  for (const auto& [what, tp, pp, extra] :
       std::vector<std::tuple<std::string, int, int, std::vector<std::string>>>{
           {"one rank, auto", 1, 1, {}},
           {"pp=2", 1, 2, {on}},
           {"tp=2", 2, 1, {on}},
           {"16-block pool", 1, 1, {on, "--worker-arg=--num-kv-blocks=16"}},
           {"16-block pool, swap", 1, 1,
            {on, "--worker-arg=--num-kv-blocks=16", "--worker-arg=--swap-space-gb=0.01",
             "--worker-arg=--preemption-mode=swap"}}}) {
    const Run r = run(tp, pp, extra);
    EXPECT_TRUE(r.window_tables) << what;
    ExpectSameGreedy(base.out, r.out, "window blocks, " + what);
    if (what.rfind("16-block pool", 0) == 0) {
      EXPECT_GT(r.preemptions, 0) << what;
    }
  }
}

// --kv-cache-dtype fp8 (E4M3 codes with a scale per token and kv head): the tokens of TP and PP
// layouts, and of a pool small enough to preempt by swapping (codes and scales go to the host
// and back), equal one FP8 rank's; gpt-oss covers sliding windows and sinks. E5M2 is refused.
TEST(Parallel, Fp8KvCacheLayoutsMatchSingleRank) {
  const std::string model = MakeTinyModel("gpt-oss", "gpt-oss", /*seed=*/3, /*num_layers=*/5);
  if (model.empty()) GTEST_SKIP() << "gpt-oss tokenizer not fetched (scripts/fetch-assets.sh)";
  constexpr int kTokens = 40;
  const auto run = [&](int tp, int pp, std::vector<std::string> extra, double* preemptions) {
    extra.insert(extra.begin(), {"--worker-arg=--kv-cache-dtype=fp8",
                                 "--worker-arg=--enable-prefix-caching=false"});
    Stack stack;
    if (!stack.Start(model, tp, pp, extra)) {
      ADD_FAILURE() << "tp=" << tp << " pp=" << pp << " did not start\n"
                    << stack.supervisor().Log();
      return std::vector<Completion>{};
    }
    std::vector<Completion> out = CompleteConcurrently(stack, kTokens);
    EXPECT_NE(HttpCall(stack.supervisor().port(), "GET", "/metrics")
                  .body.find("cache_dtype=\"fp8_e4m3\""),
              std::string::npos);
    for (int i = 0; preemptions != nullptr && i < 20 && *preemptions <= 0; ++i) {
      *preemptions = stack.Metric("num_preemptions_total");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
        << stack.supervisor().Log();
    EXPECT_NE(stack.supervisor().Log().find("MiB, FP8 E4M3)"), std::string::npos)
        << "the workers do not say their cache is FP8\n" << stack.supervisor().Log();
    return out;
  };
  const std::vector<Completion> base = run(1, 1, {}, nullptr);
  ASSERT_EQ(base.size(), Prompts().size());
  ExpectSameGreedy(base, run(2, 1, {}, nullptr), "FP8 KV, tp=2");
  ExpectSameGreedy(base, run(1, 2, {}, nullptr), "FP8 KV, pp=2");
  double preemptions = -1;
  ExpectSameGreedy(base,
                   run(1, 1,
                       {"--worker-arg=--num-kv-blocks=16", "--worker-arg=--swap-space-gb=0.01",
                        "--worker-arg=--preemption-mode=swap"},
                       &preemptions),
                   "FP8 KV, 16-block pool, swap");
  EXPECT_GT(preemptions, 0);

  ChildProcess e5m2;
  EXPECT_FALSE(e5m2.StartServer("xserv-worker", {"--model", model, "--kv-cache-dtype", "fp8_e5m2"},
                                std::chrono::seconds(30)));
  EXPECT_FALSE(e5m2.Running());
  EXPECT_NE(e5m2.Log().find("fp8_e5m2 is not supported"), std::string::npos) << e5m2.Log();
}

// On, it needs what it cannot have: a clear refusal at start, not a silent fallback.
TEST(Parallel, WindowKvBlocksOnRefusesPrefixCachingAndDenseModels) {
  const std::string gpt_oss = MakeTinyModel("gpt-oss", "gpt-oss", /*seed=*/3);
  if (gpt_oss.empty()) GTEST_SKIP() << "gpt-oss tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess with_prefixes;
  EXPECT_FALSE(with_prefixes.StartServer("xserv-worker",
                                         {"--model", gpt_oss, "--window-kv-blocks", "on"},
                                         std::chrono::seconds(30)));
  EXPECT_FALSE(with_prefixes.Running());
  EXPECT_NE(with_prefixes.Log().find("--enable-prefix-caching false"), std::string::npos)
      << with_prefixes.Log();
  const std::string& qwen3 = SharedQwen3TinyModel();
  if (qwen3.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  ChildProcess dense;
  EXPECT_FALSE(dense.StartServer("xserv-worker",
                                 {"--model", qwen3, "--window-kv-blocks", "on",
                                  "--enable-prefix-caching", "false"},
                                 std::chrono::seconds(30)));
  EXPECT_FALSE(dense.Running());
  EXPECT_NE(dense.Log().find("no sliding-window layers"), std::string::npos) << dense.Log();
}

// CompleteConcurrently on one rank serving `model`: what the pipelined layouts must reproduce.
std::vector<Completion> SingleRankConcurrent(const std::string& model, int max_tokens) {
  Stack stack;
  if (!stack.Start(model, 1)) {
    ADD_FAILURE() << "single rank did not start\n" << stack.supervisor().Log();
    return {};
  }
  std::vector<Completion> out = CompleteConcurrently(stack, max_tokens);
  EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0);
  return out;
}

// The pipelined leader keeps one step in flight per stage (--pp-overlap, default on): with
// concurrent requests the stages work on different steps at once (counted by the router's
// xserv:pipeline_overlapped_steps_total), the tokens stay those of one rank, and SIGTERM still
// drains cleanly with steps in flight. --pp-overlap=false runs one step at a time.
TEST(Parallel, PipelineKeepsAStepInFlightPerStage) {
  const std::string model = MakeTinyModel("qwen3", "qwen3", /*seed=*/3, /*num_layers=*/5);
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  constexpr int kTokens = 24;
  const std::vector<Completion> base = SingleRankConcurrent(model, kTokens);
  ASSERT_EQ(base.size(), Prompts().size());
  struct Layout {
    int tp;
    int pp;
    bool overlap;
  };
  // TP x PP: the last stage's TP peer runs plan k with the leader while the leader publishes
  // plan k+1 (a broadcast there deadlocked; plans go point to point).
  for (const Layout layout :
       {Layout{1, 2, true}, Layout{1, 3, true}, Layout{2, 2, true}, Layout{1, 2, false}}) {
    const std::string what = "tp=" + std::to_string(layout.tp) + " pp=" +
                             std::to_string(layout.pp) +
                             (layout.overlap ? " overlapped" : " one step at a time");
    Stack stack;
    ASSERT_TRUE(stack.Start(model, layout.tp, layout.pp,
                            {layout.overlap ? "--worker-arg=--pp-overlap=true"
                                            : "--worker-arg=--pp-overlap=false"}))
        << what << "\n" << stack.supervisor().Log();
    ExpectSameGreedy(base, CompleteConcurrently(stack, kTokens), what);
    // The router refreshes worker counters every 200 ms.
    double overlapped = -1;
    for (int i = 0; i < 50; ++i) {
      overlapped = stack.Metric("pipeline_overlapped_steps_total");
      if (overlapped > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (layout.overlap) {
      EXPECT_GT(overlapped, 0) << what;
    } else {
      EXPECT_EQ(overlapped, 0) << what;
    }
    EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
        << what << "\n" << stack.supervisor().Log();
  }
}

// Clients that vanish while their requests' steps are in flight (aborts between a plan and its
// result), beside requests that must come out exactly as on one rank; then SIGTERM while two
// long requests keep both pipeline steps busy: they finish, the ranks stop cleanly.
TEST(Parallel, PipelineSurvivesAbortsAndStopsWithStepsInFlight) {
  const std::string model = MakeTinyModel("qwen3", "qwen3", /*seed=*/3, /*num_layers=*/5);
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  constexpr int kTokens = 24;
  const std::vector<Completion> base = SingleRankConcurrent(model, kTokens);
  ASSERT_EQ(base.size(), Prompts().size());
  Stack stack;
  ASSERT_TRUE(stack.Start(model, 1, /*pp=*/2)) << stack.supervisor().Log();
  const int port = stack.supervisor().port();
  const std::string payload =
      json{{"prompt", {7, 8, 9}}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}}
          .dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(payload.size()) + "\r\n\r\n" + payload;
  auto vanishing = std::async(std::launch::async, [&] {
    for (int i = 0; i < 12; ++i) {
      const int fd = ConnectLoopback(port, std::chrono::seconds(10));
      if (fd < 0) continue;
      SendAll(fd, request);
      char buf[256];
      (void)recv(fd, buf, sizeof(buf), 0);  // streaming has started: its steps are in flight
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * (i % 4)));
      close(fd);
    }
  });
  const std::vector<Completion> got = CompleteConcurrently(stack, kTokens);
  vanishing.get();
  ExpectSameGreedy(base, got, "pp=2 beside vanishing clients");
  EXPECT_GT(stack.Metric("pipeline_overlapped_steps_total"), 0);

  auto long_request = [port] {
    return Post(port, "/v1/completions",
                json{{"prompt", {4, 5, 6}}, {"max_tokens", 150}, {"temperature", 0},
                     {"ignore_eos", true}});
  };
  auto first = std::async(std::launch::async, long_request);
  auto second = std::async(std::launch::async, long_request);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
      << stack.supervisor().Log();
  for (auto* f : {&first, &second}) {
    const HttpResult r = f->get();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["usage"]["completion_tokens"], 150);
  }
}

TEST(Parallel, PeerKillRestartsTheReplica) {
  const std::string model = MakeTinyModel("qwen3", "qwen3");
  if (model.empty()) GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  Stack stack;
  ASSERT_TRUE(stack.Start(model, 2)) << stack.supervisor().Log();
  ASSERT_TRUE(stack.Complete({1, 2, 3}, 4).has_value());
  const std::vector<pid_t> workers = ChildrenNamed(stack.supervisor().pid(), "xserv-worker");
  ASSERT_EQ(workers.size(), 2u);
  const pid_t peer = std::max(workers[0], workers[1]);  // started second: rank 1
  // A long generation in flight when the peer dies ends with a clean error, not a hang.
  const int port = stack.supervisor().port();
  auto in_flight = std::async(std::launch::async, [port] {
    return Post(port, "/v1/completions",
                json{{"prompt", {1, 2, 3}}, {"max_tokens", 3000}, {"temperature", 0},
                     {"ignore_eos", true}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto killed_at = Clock::now();
  kill(peer, SIGKILL);
  const HttpResult broken = in_flight.get();
  EXPECT_NE(broken.status, 200) << broken.body;
  EXPECT_TRUE(broken.Json().contains("error")) << broken.body;
  double recovery_s = -1;
  while (Clock::now() - killed_at < std::chrono::seconds(90)) {
    HttpResult r = Post(stack.supervisor().port(), "/v1/completions",
                        json{{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}});
    if (r.status == 200) {
      recovery_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
      break;
    }
    EXPECT_TRUE(r.Json().contains("error")) << r.status << " " << r.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(recovery_s, 0) << stack.supervisor().Log();
  std::cout << "tp=2 peer kill -9 -> serving again after " << recovery_s << " s\n";
  RecordProperty("tp_peer_recovery_seconds", std::to_string(recovery_s));
  EXPECT_EQ(ChildrenNamed(stack.supervisor().pid(), "xserv-worker").size(), 2u);

  // SIGTERM with a request in flight: the leader drains it to the end, then stops its peer.
  auto draining = std::async(std::launch::async, [port] {
    return Post(port, "/v1/completions",
                json{{"prompt", {4, 5, 6}}, {"max_tokens", 200}, {"temperature", 0},
                     {"ignore_eos", true}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(stack.supervisor().Stop(SIGTERM, std::chrono::seconds(60)), 0)
      << stack.supervisor().Log();
  const HttpResult drained = draining.get();
  ASSERT_EQ(drained.status, 200) << drained.body;
  EXPECT_EQ(drained.Json()["usage"]["completion_tokens"], 200);
}

}  // namespace
}  // namespace xserv::testing
