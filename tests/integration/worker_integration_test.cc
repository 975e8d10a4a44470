// A real xserv-worker process on the CPU backend with the tiny Qwen3 fixture (tests/data/models),
// driven over gRPC: golden greedy tokens, concurrency and batching invariance, joins mid-stream,
// cancellation freeing KV, seeds, preemption with a tiny pool, prompt logprobs, invalid requests,
// and SIGTERM draining.
#include <algorithm>
#include <future>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/safetensors/float_convert.h"
#include "common/safetensors/safetensors_file.h"
#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_client.h"

namespace xserv::testing {
namespace {

const char* kModel = "tests/data/models/qwen3-tiny";

std::vector<uint32_t> GoldenInts(const std::string& name) {
  auto file = safetensors::SafetensorsFile::Open(SourcePath(kModel) + "/golden.safetensors");
  auto view = file->Tensor(name);
  std::vector<int32_t> v(view->NumElements());
  std::memcpy(v.data(), view->data.data(), view->data.size());
  return std::vector<uint32_t>(v.begin(), v.end());
}

std::vector<float> GoldenFloats(const std::string& name) {
  auto file = safetensors::SafetensorsFile::Open(SourcePath(kModel) + "/golden.safetensors");
  auto view = file->Tensor(name);
  std::vector<float> v(view->NumElements());
  EXPECT_TRUE(safetensors::ConvertToFloat(view->dtype, view->data, v).ok());
  return v;
}

std::vector<uint32_t> Prompt(int seed, int length) {
  std::vector<uint32_t> p;
  for (int i = 0; i < length; ++i) p.push_back(static_cast<uint32_t>((seed * 131 + i * 17) % 500));
  return p;
}

// The suite runs against a default worker and one with --overlap-scheduling (step N+1 planned
// and prepared while N runs; its decodes take N's tokens once drawn): every stream must be the
// same.
struct DefaultScheduling {
  static std::vector<std::string> Flags() { return {}; }
};
struct OverlapScheduling {
  static std::vector<std::string> Flags() { return {"--overlap-scheduling", "true"}; }
};

template <typename Scheduling>
class WorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = new ChildProcess();
    std::vector<std::string> args = {"--model", SourcePath(kModel), "--max-num-batched-tokens",
                                     "256", "--threads", "2"};
    for (const std::string& flag : Scheduling::Flags()) args.push_back(flag);
    ASSERT_TRUE(worker_->StartServer("xserv-worker", args)) << worker_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(worker_->Stop(SIGTERM), 0) << worker_->Log();
    delete worker_;
  }
  void TearDown() override {
    if (this->HasFailure()) std::cerr << worker_->Log().substr(0, 20000);
  }
  static ChildProcess* worker_;
};
template <typename Scheduling>
ChildProcess* WorkerTest<Scheduling>::worker_ = nullptr;

using Schedulings = ::testing::Types<DefaultScheduling, OverlapScheduling>;
class SchedulingNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, OverlapScheduling> ? "Overlap" : "Default";
  }
};
TYPED_TEST_SUITE(WorkerTest, Schedulings, SchedulingNames);

TYPED_TEST(WorkerTest, HealthAndInfo) {
  auto stub = WorkerStub(this->worker_->address());
  grpc::ClientContext ctx;
  wv1::HealthResponse health;
  ASSERT_TRUE(stub->Health(&ctx, wv1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), wv1::HealthResponse::STATE_SERVING);
  grpc::ClientContext ctx2;
  wv1::InfoResponse info;
  ASSERT_TRUE(stub->Info(&ctx2, wv1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.model_type(), "qwen3");
  EXPECT_EQ(info.vocab_size(), 512u);
  EXPECT_EQ(info.max_context(), 256u);
  EXPECT_EQ(info.block_size(), 16u);
  EXPECT_EQ(info.model_name(), "qwen3-tiny");
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_GT(info.kv_capacity_blocks(), 0u);
}

TYPED_TEST(WorkerTest, GreedyTokensMatchTransformers) {
  auto stub = WorkerStub(this->worker_->address());
  for (int i = 0; i < 2; ++i) {
    const auto prompt = GoldenInts("input_ids." + std::to_string(i));
    const auto expected = GoldenInts("greedy." + std::to_string(i));
    GenerateOutcome out = Generate(*stub, GreedyRequest("golden-" + std::to_string(i), prompt,
                                                        static_cast<uint32_t>(expected.size())));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens, expected);
    ASSERT_TRUE(out.has_finished);
    EXPECT_EQ(out.finished.reason(), wv1::FINISH_REASON_LENGTH);
    EXPECT_EQ(out.finished.prompt_tokens(), prompt.size());
    EXPECT_EQ(out.finished.completion_tokens(), expected.size());
  }
}

TYPED_TEST(WorkerTest, ThirtyTwoConcurrentRequestsEqualEachAlone) {
  auto stub = WorkerStub(this->worker_->address());
  std::vector<std::vector<uint32_t>> alone;
  for (int i = 0; i < 32; ++i) {
    GenerateOutcome out =
        Generate(*stub, GreedyRequest("alone-" + std::to_string(i), Prompt(i, 5 + i % 23), 12));
    ASSERT_TRUE(out.status.ok());
    alone.push_back(out.tokens);
  }
  std::vector<std::future<GenerateOutcome>> futures;
  for (int i = 0; i < 32; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      auto own = WorkerStub(this->worker_->address());
      return Generate(*own, GreedyRequest("batch-" + std::to_string(i), Prompt(i, 5 + i % 23), 12));
    }));
  }
  for (int i = 0; i < 32; ++i) {
    GenerateOutcome out = futures[i].get();
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens, alone[i]) << "request " << i;
  }
}

TYPED_TEST(WorkerTest, RequestJoiningMidGenerationIsUnaffected) {
  auto stub = WorkerStub(this->worker_->address());
  const GenerateOutcome late_alone = Generate(*stub, GreedyRequest("late-alone", Prompt(7, 30), 20));
  auto long_run = std::async(std::launch::async, [&] {
    auto own = WorkerStub(this->worker_->address());
    return Generate(*own, GreedyRequest("long", Prompt(3, 10), 150));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const GenerateOutcome late = Generate(*stub, GreedyRequest("late", Prompt(7, 30), 20));
  EXPECT_EQ(late.tokens, late_alone.tokens);
  EXPECT_EQ(long_run.get().tokens.size(), 150u);
}

wv1::LoadResponse GetLoad(wv1::Worker::Stub& stub) {
  grpc::ClientContext ctx;
  wv1::LoadResponse load;
  EXPECT_TRUE(stub.Load(&ctx, wv1::LoadRequest(), &load).ok());
  return load;
}

TYPED_TEST(WorkerTest, CancellationAbortsAndFreesBlocks) {
  auto stub = WorkerStub(this->worker_->address());
  GenerateOutcome out = Generate(*stub, GreedyRequest("cancel-me", Prompt(11, 60), 180), 3);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(out.tokens.size(), 180u);
  // Within a few steps the request is gone and its blocks are free (prefix-cached blocks count
  // as free: they are evictable).
  wv1::LoadResponse load;
  for (int i = 0; i < 200; ++i) {
    load = GetLoad(*stub);
    if (load.num_running() == 0 && load.kv_blocks_free() == load.kv_blocks_total()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(load.num_running(), 0u);
  EXPECT_EQ(load.num_waiting(), 0u);
  EXPECT_EQ(load.kv_blocks_free(), load.kv_blocks_total());
}

TYPED_TEST(WorkerTest, SeedsReproduce) {
  auto stub = WorkerStub(this->worker_->address());
  auto sampled = [&](const std::string& id, uint64_t seed) {
    wv1::GenerateRequest r = GreedyRequest(id, Prompt(5, 8), 24);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(seed);
    return Generate(*stub, r).tokens;
  };
  const auto a = sampled("seed-a", 1234);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(sampled("seed-b", 1234), a);
  EXPECT_NE(sampled("seed-c", 4321), a);
}

TYPED_TEST(WorkerTest, PromptLogprobsMatchTransformers) {
  auto stub = WorkerStub(this->worker_->address());
  const auto prompt = GoldenInts("input_ids.0");
  const auto logits = GoldenFloats("logits.0");
  wv1::GenerateRequest r = GreedyRequest("echo", prompt, 1);
  r.mutable_sampling()->set_prompt_logprobs(2);
  r.mutable_sampling()->set_logprobs(1);
  GenerateOutcome out = Generate(*stub, r);
  ASSERT_TRUE(out.status.ok());
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
  const int vocab = 512;
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const float* row = &logits[i * vocab];
    double max = row[0], sum = 0;
    for (int v = 0; v < vocab; ++v) max = std::max<double>(max, row[v]);
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    const double expected = row[prompt[i + 1]] - max - std::log(sum);
    EXPECT_EQ(out.prompt_logprobs[i].token_id(), prompt[i + 1]);
    EXPECT_NEAR(out.prompt_logprobs[i].logprob(), expected, 1e-4) << i;
    EXPECT_EQ(out.prompt_logprobs[i].top_size(), 2);
  }
  ASSERT_EQ(out.logprobs.size(), 1u);
  EXPECT_EQ(out.logprobs[0].rank(), 1u);  // greedy picks the top token
}

TYPED_TEST(WorkerTest, InvalidRequestsAreRejectedAndServingContinues) {
  auto stub = WorkerStub(this->worker_->address());
  auto code = [&](wv1::GenerateRequest r) { return Generate(*stub, r).status.error_code(); };
  EXPECT_EQ(code(GreedyRequest("empty", {}, 4)), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(GreedyRequest("big-id", {1, 2, 9999}, 4)), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(GreedyRequest("too-long", Prompt(1, 10), 1000)),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(GreedyRequest("zero", Prompt(1, 10), 0)), grpc::StatusCode::INVALID_ARGUMENT);
  wv1::GenerateRequest hot = GreedyRequest("hot", Prompt(1, 10), 4);
  hot.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(code(hot), grpc::StatusCode::INVALID_ARGUMENT);
  wv1::GenerateRequest topp = GreedyRequest("topp", Prompt(1, 10), 4);
  topp.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(code(topp), grpc::StatusCode::INVALID_ARGUMENT);
  wv1::GenerateRequest noid = GreedyRequest("", Prompt(1, 10), 4);
  EXPECT_EQ(code(noid), grpc::StatusCode::INVALID_ARGUMENT);
  GenerateOutcome fine = Generate(*stub, GreedyRequest("after-errors", Prompt(1, 10), 4));
  EXPECT_TRUE(fine.status.ok());
  EXPECT_EQ(fine.tokens.size(), 4u);
}

// Overlap scheduling against the default on the same requests, run concurrently: stop ids
// (the first drawn ends the stream; a continued row after it is dropped), min_tokens holding
// them back, repetition / presence / frequency penalties and seeded sampling (which read every
// token drawn so far, so a step that sampled before its predecessor's token was applied would
// differ), logprobs, prompt logprobs (a prompt's last chunk continued by its first decode), and
// max_tokens of 1 and 2 (nothing continued past the last token).
TEST(WorkerOverlap, StreamsEqualTheDefaultScheduling) {
  ChildProcess base, overlap;
  ASSERT_TRUE(base.StartServer("xserv-worker", {"--model", SourcePath(kModel)})) << base.Log();
  ASSERT_TRUE(overlap.StartServer("xserv-worker", {"--model", SourcePath(kModel),
                                                   "--overlap-scheduling", "true"}))
      << overlap.Log();
  auto free_run = [](const std::string& address) {
    auto stub = WorkerStub(address);
    return Generate(*stub, GreedyRequest("free", Prompt(4, 12), 30)).tokens;
  };
  const std::vector<uint32_t> free_tokens = free_run(base.address());
  ASSERT_EQ(free_tokens.size(), 30u);
  EXPECT_EQ(free_run(overlap.address()), free_tokens);
  const uint32_t stop = free_tokens[6];
  const size_t first_stop =
      std::find(free_tokens.begin(), free_tokens.end(), stop) - free_tokens.begin();

  std::vector<wv1::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    wv1::GenerateRequest r = GreedyRequest(absl::StrCat("r", i), Prompt(i, 5 + 3 * i), 24);
    wv1::SamplingParams& p = *r.mutable_sampling();
    switch (i % 6) {
      case 0: p.set_repetition_penalty(1.3f); break;
      case 1: p.set_presence_penalty(1.5f), p.set_frequency_penalty(0.7f); break;
      case 2: p.set_temperature(0.8f), p.set_seed(100 + i), p.set_top_k(20); break;
      case 3: p.set_logprobs(3); break;
      case 4: p.set_max_tokens(1 + i % 2); break;
      case 5: p.set_temperature(1.0f), p.set_seed(7), p.set_min_p(0.05f); break;
    }
    requests.push_back(r);
  }
  wv1::GenerateRequest stopped = GreedyRequest("stopped", Prompt(4, 12), 30);
  stopped.mutable_sampling()->add_stop_token_ids(stop);
  requests.push_back(stopped);
  wv1::GenerateRequest echo = GreedyRequest("echo", Prompt(9, 30), 6);  // a continued prefill
  echo.mutable_sampling()->set_prompt_logprobs(2);
  requests.push_back(echo);
  wv1::GenerateRequest held = stopped;
  held.set_request_id("held");
  held.mutable_sampling()->set_min_tokens(static_cast<uint32_t>(first_stop) + 3);
  requests.push_back(held);

  auto run_all = [&](const std::string& address) {
    std::vector<std::future<GenerateOutcome>> futures;
    for (const wv1::GenerateRequest& r : requests) {
      futures.push_back(std::async(std::launch::async, [address, r] {
        auto stub = WorkerStub(address);
        return Generate(*stub, r);
      }));
    }
    std::vector<GenerateOutcome> outs;
    for (auto& f : futures) outs.push_back(f.get());
    return outs;
  };
  const std::vector<GenerateOutcome> want = run_all(base.address());
  const std::vector<GenerateOutcome> got = run_all(overlap.address());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].request_id());
    ASSERT_TRUE(want[i].status.ok()) << want[i].status.error_message();
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    ASSERT_TRUE(got[i].has_finished && want[i].has_finished);
    EXPECT_EQ(got[i].finished.reason(), want[i].finished.reason());
    EXPECT_EQ(got[i].finished.completion_tokens(), want[i].finished.completion_tokens());
    ASSERT_EQ(got[i].prompt_logprobs.size(), want[i].prompt_logprobs.size());
    for (size_t j = 0; j < got[i].prompt_logprobs.size(); ++j) {
      EXPECT_FLOAT_EQ(got[i].prompt_logprobs[j].logprob(), want[i].prompt_logprobs[j].logprob());
    }
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (size_t j = 0; j < got[i].logprobs.size(); ++j) {
      EXPECT_EQ(got[i].logprobs[j].token_id(), want[i].logprobs[j].token_id());
      EXPECT_FLOAT_EQ(got[i].logprobs[j].logprob(), want[i].logprobs[j].logprob());
    }
  }
  // The stop id ends the stream at its first occurrence; min_tokens holds it back.
  auto outcome_of = [&](const std::string& id) -> const GenerateOutcome& {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].request_id() == id) return got[i];
    }
    ADD_FAILURE() << "no request " << id;
    return got.front();
  };
  const GenerateOutcome& s = outcome_of("stopped");
  EXPECT_EQ(s.tokens, std::vector<uint32_t>(free_tokens.begin(),
                                            free_tokens.begin() + first_stop + 1));
  EXPECT_EQ(s.finished.reason(), wv1::FINISH_REASON_STOP);
  const GenerateOutcome& h = outcome_of("held");
  ASSERT_GE(h.tokens.size(), first_stop + 3);
  EXPECT_EQ(std::count(h.tokens.begin(), h.tokens.begin() + first_stop + 2, stop), 0);
  // The overlap worker planned steps while others ran (the free run alone gives 27 or more);
  // the default one did not.
  auto overlap_stub = WorkerStub(overlap.address());
  auto base_stub = WorkerStub(base.address());
  EXPECT_GT(GetLoad(*overlap_stub).num_overlapped_steps_total(), 20u);
  EXPECT_EQ(GetLoad(*base_stub).num_overlapped_steps_total(), 0u);
  EXPECT_EQ(overlap.Stop(), 0);
  EXPECT_EQ(base.Stop(), 0);
}

TEST(WorkerPreemption, TinyKvPoolGivesTheSameTokens) {
  // 10 blocks of 16 tokens cannot hold 8 sequences of ~60 tokens at once: the scheduler must
  // preempt (swap, then recompute when the host pool is small) and still produce identical
  // greedy tokens.
  // Also with overlap scheduling: continued decodes are never preemption victims.
  struct Variant {
    const char* mode;
    const char* overlap;
  };
  for (const auto& [mode, overlap] : {Variant{"swap", "false"}, Variant{"recompute", "false"},
                                      Variant{"swap", "true"}, Variant{"recompute", "true"}}) {
    ChildProcess big, tiny;
    ASSERT_TRUE(big.StartServer("xserv-worker", {"--model", SourcePath(kModel)})) << big.Log();
    ASSERT_TRUE(tiny.StartServer("xserv-worker", {"--model", SourcePath(kModel), "--num-kv-blocks",
                                                  "10", "--swap-space-gb", "0.0001",
                                                  "--preemption-mode", mode,
                                                  "--overlap-scheduling", overlap}))
        << tiny.Log();
    auto run_all = [](const std::string& address) {
      std::vector<std::future<GenerateOutcome>> futures;
      for (int i = 0; i < 8; ++i) {
        futures.push_back(std::async(std::launch::async, [address, i] {
          auto stub = WorkerStub(address);
          return Generate(*stub, GreedyRequest(absl::StrCat("p", i), Prompt(i, 20 + i), 40));
        }));
      }
      std::vector<std::vector<uint32_t>> tokens;
      for (auto& f : futures) {
        GenerateOutcome out = f.get();
        EXPECT_TRUE(out.status.ok()) << out.status.error_message();
        tokens.push_back(out.tokens);
      }
      return tokens;
    };
    const auto expected = run_all(big.address());
    EXPECT_EQ(run_all(tiny.address()), expected)
        << mode << " overlap " << overlap << "\n" << tiny.Log().substr(0, 5000);
    auto stub = WorkerStub(tiny.address());
    EXPECT_GT(GetLoad(*stub).num_preemptions_total(), 0u) << mode << " overlap " << overlap;
    EXPECT_EQ(tiny.Stop(), 0);
    EXPECT_EQ(big.Stop(), 0);
  }
}

TEST(WorkerShutdown, SigtermDrainsInFlightRequests) {
  ChildProcess worker;
  ASSERT_TRUE(worker.StartServer("xserv-worker", {"--model", SourcePath(kModel)})) << worker.Log();
  auto running = std::async(std::launch::async, [&] {
    auto stub = WorkerStub(worker.address());
    return Generate(*stub, GreedyRequest("drain-me", Prompt(2, 10), 120));
  });
  // SIGTERM once the worker holds the request (a fixed sleep raced a slow client on a busy host).
  auto stub = WorkerStub(worker.address());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    wv1::LoadResponse load;
    if (stub->Load(&ctx, wv1::LoadRequest(), &load).ok() &&
        load.num_running() + load.num_waiting() > 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(worker.Stop(SIGTERM), 0) << worker.Log();
  GenerateOutcome out = running.get();
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 120u);  // accepted before SIGTERM: finished, not dropped
}

// SIGTERM before the worker serves (a leader waiting for its TP peer at the rendezvous, which
// could take --comm-timeout-s): it exits at once instead of after the supervisor's grace.
TEST(WorkerShutdown, SigtermWhileStartingExitsAtOnce) {
  ChildProcess leader;
  EXPECT_FALSE(leader.StartServer(
      "xserv-worker", {"--model", SourcePath(kModel), "--tp-size", "2", "--tp-rank", "0"},
      std::chrono::seconds(3)));
  ASSERT_TRUE(leader.Running()) << leader.Log();
  EXPECT_EQ(leader.Stop(SIGTERM, std::chrono::seconds(5)), 0) << leader.Log();
  EXPECT_NE(leader.Log().find("while starting"), std::string::npos) << leader.Log();
}

// The worker refuses to start, having logged `message`.
void ExpectWorkerRefuses(std::vector<std::string> args, const std::string& message) {
  args.insert(args.begin(), {"--model", SourcePath(kModel)});
  std::string log;
  EXPECT_TRUE(StartIsRefused("xserv-worker", args, &log)) << log;
  EXPECT_NE(log.find(message), std::string::npos) << log;
}

// The context (max_model_len) fits the model and the KV pool: one request of it must fit, as
// vLLM requires. The model's 256 positions shrink to a smaller pool's with a warning; an
// explicit --max-model-len the model or the pool cannot hold is refused at start.
TEST(WorkerStart, ContextFitsTheModelAndTheKvPool) {
  ExpectWorkerRefuses({"--max-model-len", "1000"}, "exceeds the model's context of 256");
  ExpectWorkerRefuses({"--max-model-len", "100", "--num-kv-blocks", "2"},
                      "the KV pool holds 32 tokens");
  ExpectWorkerRefuses({"--max-model-len", "1"}, "--max-model-len must be >= 2");
  // NaN passes CLI11's Range; these would size pools and deadlines from it.
  ExpectWorkerRefuses({"--kv-cache-memory", "nan"}, "--kv-cache-memory");
  ExpectWorkerRefuses({"--drain-timeout-s", "nan"}, "--drain-timeout-s");
  ExpectWorkerRefuses({"--max-num-seqs", "0"}, "--max-num-seqs");

  ChildProcess small;
  ASSERT_TRUE(small.StartServer("xserv-worker",
                                {"--model", SourcePath(kModel), "--num-kv-blocks", "4"}))
      << small.Log();
  EXPECT_NE(small.Log().find("the KV pool holds 64 tokens"), std::string::npos) << small.Log();
  auto stub = WorkerStub(small.address());
  grpc::ClientContext ctx;
  wv1::InfoResponse info;
  ASSERT_TRUE(stub->Info(&ctx, wv1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.max_context(), 64u);
  // A request that fits is served; a longer prompt is refused by the scheduler's own check.
  EXPECT_EQ(Generate(*stub, GreedyRequest("fits", Prompt(1, 20), 8)).tokens.size(), 8u);
  EXPECT_FALSE(Generate(*stub, GreedyRequest("too-long", Prompt(1, 80), 8)).status.ok());
  EXPECT_EQ(small.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace xserv::testing
