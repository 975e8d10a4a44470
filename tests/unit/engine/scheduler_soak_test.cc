// Randomised soak: thousands of adds, aborts (also between Step and OnStepResult), steps and
// results over random configurations, with every invariant checked after every step, outputs
// checked against the reference model, and an empty pool at the end.
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/fake_model.h"
#include "tests/unit/engine/test_util.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine {
namespace {

constexpr int32_t kSoakVocab = 64;
constexpr int32_t kEos = 0;  // ~1.5% of sampled tokens end a request with kStop

struct SoakParams {
  uint32_t seed;
  PreemptionMode mode;
  bool chunked;
  bool prefix_caching;
  int32_t in_flight = 1;  // max_in_flight_steps: > 1 keeps plans outstanding as a pipeline does
  bool overlap = false;   // overlap_decodes (with in_flight 2)
};

SchedulerConfig RandomConfig(const SoakParams& p, std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SchedulerConfig c;
  c.max_model_len = 160;
  c.enable_chunked_prefill = p.chunked;
  c.max_num_batched_tokens = p.chunked ? pick(8, 96) : pick(160, 256);
  c.long_prefill_token_threshold = pick(0, 1) ? pick(4, 40) : 0;
  c.max_num_seqs = pick(1, 12);
  c.policy = pick(0, 1) ? SchedulingPolicy(PriorityPolicy{}) : SchedulingPolicy(FcfsPolicy{});
  c.preemption_mode = p.mode;
  c.admission_watermark = pick(0, 1) ? 0.05f : 0.f;
  c.blocks.block_size = pick(0, 1) ? 4 : 16;
  // From "a max-length request does not fit" (kError paths) to a few max-length requests: the
  // pool is always tight enough to preempt.
  const int full = (c.max_model_len + c.blocks.block_size - 1) / c.blocks.block_size;
  c.blocks.num_device_blocks = pick(full * 6 / 10, full * 3);
  c.blocks.num_host_blocks = p.mode == PreemptionMode::kSwap && pick(0, 3) != 0
                                 ? pick(full / 2, full * 3)
                                 : pick(0, 1) * full;  // 0 turns swapping off
  c.blocks.enable_prefix_caching = p.prefix_caching;
  c.max_in_flight_steps = p.in_flight;
  c.overlap_decodes = p.overlap;
  return c;
}

struct Live {
  std::vector<int32_t> prompt;
  int32_t max_tokens;
  std::vector<int32_t> output;
};

class SoakTest : public ::testing::TestWithParam<SoakParams> {};

TEST_P(SoakTest, InvariantsHoldAndNothingLeaks) {
  const SoakParams p = GetParam();
  std::mt19937 rng(p.seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const SchedulerConfig c = RandomConfig(p, rng);
  ManualClock clock;
  auto s = testing::MakeScheduler(c, &clock);
  ASSERT_NE(s, nullptr);
  testing::FakeModel model(c.blocks, kSoakVocab, kEos);

  // Shared prefixes so that the prefix cache gets hits, evictions and shared blocks.
  std::vector<std::vector<int32_t>> bases;
  for (uint32_t i = 0; i < 4; ++i) bases.push_back(testing::Prompt(120, p.seed * 10 + i));

  std::map<RequestId, Live> live;
  std::map<RequestId, Live> all;  // every request ever added, for the reference check
  std::map<RequestId, testing::Outcome> done;
  RequestId next_id = 1;
  int num_steps = 0;
  int num_preemptions = 0;
  int num_continued = 0;  // decodes planned while their previous step ran (overlap)

  auto random_live = [&]() -> std::optional<RequestId> {
    if (live.empty()) return std::nullopt;
    auto it = live.begin();
    std::advance(it, pick(0, static_cast<int>(live.size()) - 1));
    return it->first;
  };
  auto abort_one = [&]() {
    if (auto id = random_live()) {
      const absl::Status status = s->AbortRequest(*id);
      // NotFound: it ended in the last OnStepResult and the next plan will report it.
      if (status.code() == absl::StatusCode::kNotFound) return;
      ASSERT_TRUE(status.ok()) << status;
      done[*id] = {.tokens = live[*id].output, .reason = FinishReason::kAbort, .message = ""};
      live.erase(*id);
    }
  };
  // Plans handed out and not yet executed, oldest first (several with p.in_flight > 1).
  std::deque<StepPlan> outstanding;
  auto finish_oldest = [&](bool abort_mid_step) {
    const StepPlan plan = std::move(outstanding.front());
    outstanding.pop_front();
    if (abort_mid_step) abort_one();
    StepResult result = model.Execute(plan);
    if (!plan.HasWork()) return;  // block moves only
    for (const SampledToken& t : result.sampled) {
      // As the engine: a row of a request the scheduler has ended (a continued decode after a
      // stop) streams nothing.
      auto it = live.find(t.request_id);
      if (it != live.end() && s->State(t.request_id)) it->second.output.push_back(t.token_id);
    }
    ASSERT_TRUE(s->OnStepResult(result).ok());
    ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  };
  auto step = [&](bool abort_mid_step) {
    if (s->CanStep()) {
      StepPlan plan = s->Step();
      ++num_steps;
      num_preemptions += static_cast<int>(plan.preempted.size());
      for (const ScheduledSequence& seq : plan.seqs) num_continued += seq.continues ? 1 : 0;
      EXPECT_LE(plan.num_batched_tokens, c.max_num_batched_tokens);
      EXPECT_LE(static_cast<int32_t>(plan.seqs.size()), c.max_num_seqs);
      for (const FinishedRequest& f : plan.finished) {
        auto it = live.find(f.request_id);
        if (it == live.end()) continue;  // aborted by the test, already recorded
        done[f.request_id] = {.tokens = it->second.output, .reason = f.reason, .message = ""};
        live.erase(it);
      }
      for (const StepPlan& other : outstanding) {
        for (const ScheduledSequence& seq : plan.seqs) {
          // Overlap scheduling continues a decode of the last outstanding plan; nothing else
          // may be in two.
          const ScheduledSequence* before = testing::FindSeq(other, seq.request_id);
          ASSERT_TRUE(before == nullptr || (seq.continues && before->samples &&
                                            &other == testing::LastWithWork(outstanding)))
              << "request " << seq.request_id << " in two outstanding plans";
        }
      }
      // A plan of block moves only (a request preempting itself) must run too.
      if (plan.HasWork() || plan.HasBlockOps()) outstanding.push_back(std::move(plan));
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    }
    // A pipelined engine sometimes plans again before the oldest result is back.
    if (outstanding.empty() || (s->CanStep() && pick(0, 1) == 0)) return;
    finish_oldest(abort_mid_step);
  };

  for (int op = 0; op < 5000; ++op) {
    const int r = pick(0, 19);
    if (r < 5) {
      const auto& base = bases[pick(0, 3)];
      std::vector<int32_t> prompt(base.begin(), base.begin() + pick(0, 100));
      const int32_t tail = pick(prompt.empty() ? 1 : 0, 40);
      for (int i = 0; i < tail; ++i) prompt.push_back(pick(1, kSoakVocab - 1));
      if (static_cast<int32_t>(prompt.size()) >= c.max_model_len) prompt.resize(c.max_model_len - 1);
      const int32_t max_tokens = pick(1, 60);
      RequestSpec spec = testing::Spec(next_id, prompt, max_tokens, pick(0, 3));
      spec.use_prefix_cache = pick(0, 9) != 0;
      ASSERT_TRUE(s->AddRequest(std::move(spec)).ok());
      live[next_id] = {.prompt = prompt, .max_tokens = max_tokens, .output = {}};
      all[next_id] = live[next_id];
      ++next_id;
    } else if (r < 7) {
      abort_one();
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    } else {
      step(/*abort_mid_step=*/r == 7);
    }
    clock.Advance(std::chrono::microseconds(pick(0, 500)));
  }
  // Drain: no hang allowed. (One sequence per step and idle iterations of a pipelined run can
  // take tens of thousands of iterations.)
  for (int i = 0; i < 200000 && s->HasPendingWork(); ++i) step(false);
  while (!outstanding.empty()) finish_oldest(false);  // plans of requests aborted in flight
  ASSERT_FALSE(s->HasPendingWork()) << "scheduler did not drain";
  EXPECT_TRUE(live.empty());

  const BlockManagerStats stats = s->Stats().blocks;
  EXPECT_EQ(stats.num_used_device_blocks, 0);
  EXPECT_EQ(stats.num_free_device_blocks, stats.num_device_blocks);
  EXPECT_EQ(stats.num_free_host_blocks, stats.num_host_blocks);
  EXPECT_EQ(s->block_manager().NumSequences(), 0);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();

  // Every stream is the reference stream: complete for stop/length, a prefix otherwise.
  int num_completed = 0;
  for (const auto& [id, outcome] : done) {
    ASSERT_TRUE(outcome.reason.has_value());
    const Live& spec = all.at(id);
    const testing::Outcome want =
        testing::Reference(spec.prompt, spec.max_tokens, c.max_model_len, kSoakVocab, kEos);
    if (*outcome.reason == FinishReason::kStop || *outcome.reason == FinishReason::kLength) {
      ++num_completed;
      EXPECT_EQ(outcome.tokens, want.tokens) << "request " << id;
      EXPECT_EQ(outcome.reason, want.reason) << "request " << id;
    } else {
      ASSERT_LE(outcome.tokens.size(), want.tokens.size()) << "request " << id;
      EXPECT_TRUE(std::equal(outcome.tokens.begin(), outcome.tokens.end(), want.tokens.begin()))
          << "request " << id;
    }
  }
  EXPECT_GT(num_completed, 0);
  EXPECT_GT(num_steps, 100);
  EXPECT_EQ(num_continued > 0, p.overlap) << num_continued << " continued decodes";
  RecordProperty("preemptions", num_preemptions);
  RecordProperty("prefix_hit_tokens", static_cast<int>(stats.prefix_hit_tokens));
}

// Bursty arrivals without aborts: every request must complete (or, if larger than the
// pool, fail) with exactly the reference stream.
TEST_P(SoakTest, OutputsMatchTheReference) {
  const SoakParams p = GetParam();
  std::mt19937 rng(p.seed + 1000);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const SchedulerConfig c = RandomConfig(p, rng);
  ManualClock clock;
  auto s = testing::MakeScheduler(c, &clock);
  ASSERT_NE(s, nullptr);
  testing::Driver driver(*s, kSoakVocab, kEos);
  std::map<RequestId, Live> specs;
  for (RequestId id = 1; id <= 150; ++id) {
    std::vector<int32_t> prompt = testing::Prompt(pick(1, 40), p.seed % 3);  // shared prefixes
    for (int i = pick(0, 30); i > 0; --i) prompt.push_back(pick(1, kSoakVocab - 1));
    const int32_t max_tokens = pick(1, 40);
    ASSERT_TRUE(s->AddRequest(testing::Spec(id, prompt, max_tokens, pick(0, 3))).ok());
    specs[id] = {.prompt = prompt, .max_tokens = max_tokens, .output = {}};
    for (int k = pick(0, 2); k > 0; --k) driver.Step();
  }
  driver.RunToCompletion();
  for (const auto& [id, spec] : specs) {
    const testing::Outcome& got = driver.outcomes().at(id);
    const testing::Outcome want =
        testing::Reference(spec.prompt, spec.max_tokens, c.max_model_len, kSoakVocab, kEos);
    ASSERT_TRUE(got.reason.has_value());
    if (*got.reason == FinishReason::kError) {
      // Only a sequence larger than the whole pool may fail; what it streamed is still right.
      EXPECT_GT(static_cast<int32_t>(spec.prompt.size() + got.tokens.size()),
                c.blocks.num_device_blocks * c.blocks.block_size);
      EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.tokens.begin()));
    } else {
      EXPECT_EQ(got.tokens, want.tokens) << "request " << id;
      EXPECT_EQ(got.reason, want.reason) << "request " << id;
    }
  }
  EXPECT_EQ(s->Stats().blocks.num_used_device_blocks, 0);
}

std::vector<SoakParams> AllParams() {
  std::vector<SoakParams> out;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
      for (bool chunked : {true, false}) {
        for (bool prefix_caching : {true, false}) {
          out.push_back({.seed = seed, .mode = mode, .chunked = chunked,
                         .prefix_caching = prefix_caching});
        }
      }
    }
  }
  // Pipelined: two or three plans outstanding.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
      for (bool chunked : {true, false}) {
        out.push_back({.seed = seed, .mode = mode, .chunked = chunked, .prefix_caching = true,
                       .in_flight = static_cast<int32_t>(2 + seed % 2)});
      }
    }
  }
  // Overlap scheduling: decodes continue with placeholders while their previous step runs.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
      for (bool chunked : {true, false}) {
        out.push_back({.seed = seed, .mode = mode, .chunked = chunked,
                       .prefix_caching = seed % 2 == 1, .in_flight = 2, .overlap = true});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Random, SoakTest, ::testing::ValuesIn(AllParams()),
    [](const ::testing::TestParamInfo<SoakParams>& info) {
      const SoakParams& p = info.param;
      return "seed" + std::to_string(p.seed) +
             (p.mode == PreemptionMode::kSwap ? "_swap" : "_recompute") +
             (p.chunked ? "_chunked" : "_whole") + (p.prefix_caching ? "_cache" : "_nocache") +
             (p.in_flight > 1 ? "_inflight" + std::to_string(p.in_flight) : "") +
             (p.overlap ? "_overlap" : "");
    });

}  // namespace
}  // namespace xserv::engine
