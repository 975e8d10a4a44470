// Preemption (swap and recompute) and abort in every state.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/fake_model.h"
#include "tests/unit/engine/test_util.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine {
namespace {

using testing::Driver;
using testing::kVocab;
using testing::MakeScheduler;
using testing::Prompt;
using testing::Reference;
using testing::RoomyConfig;
using testing::Spec;

struct RunStats {
  int num_preempted = 0;
  int num_swap_out_ops = 0;
  int num_swap_in_ops = 0;
  int num_resumed = 0;
  int max_batched_tokens = 0;
  std::string digest;  // every plan, see testing::Digest
};

// Twelve requests of 20..60 prompt tokens and 20..30 generated ones, arriving over time.
std::map<RequestId, testing::Outcome> RunWorkload(const SchedulerConfig& c, RunStats* stats) {
  ManualClock clock;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  RequestId next_id = 1;
  for (int step = 0; step < 5000 && (next_id <= 12 || s->HasPendingWork()); ++step) {
    if (next_id <= 12 && step % 3 == 0) {
      const int32_t len = 20 + static_cast<int32_t>((next_id * 7) % 41);
      EXPECT_TRUE(s->AddRequest(Spec(next_id, Prompt(len, next_id), 20 + next_id % 11)).ok());
      ++next_id;
    }
    StepPlan plan = driver.Step();
    EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    stats->num_preempted += static_cast<int>(plan.preempted.size());
    stats->num_swap_out_ops += static_cast<int>(plan.swap_out.size());
    stats->num_swap_in_ops += static_cast<int>(plan.swap_in.size());
    stats->max_batched_tokens = std::max(stats->max_batched_tokens, plan.num_batched_tokens);
    for (const auto& seq : plan.seqs) stats->num_resumed += seq.resumed;
    stats->digest += testing::Digest(plan);
  }
  EXPECT_FALSE(s->HasPendingWork());
  EXPECT_EQ(s->Stats().blocks.num_used_device_blocks, 0);
  EXPECT_EQ(s->Stats().blocks.num_free_host_blocks, c.blocks.num_host_blocks);
  return driver.outcomes();
}

SchedulerConfig TinyPool(PreemptionMode mode, bool prefix_caching) {
  SchedulerConfig c = RoomyConfig();
  c.max_num_batched_tokens = 32;
  c.max_num_seqs = 8;
  c.preemption_mode = mode;
  c.blocks.num_device_blocks = 10;  // the longest request needs 6
  c.blocks.num_host_blocks = 12;
  c.blocks.enable_prefix_caching = prefix_caching;
  return c;
}

class PreemptionTest : public ::testing::TestWithParam<std::tuple<PreemptionMode, bool>> {};

TEST_P(PreemptionTest, TinyPoolGivesTheSameTokensAsAHugePool) {
  const auto [mode, prefix_caching] = GetParam();
  RunStats tiny_stats, huge_stats;
  const auto tiny = RunWorkload(TinyPool(mode, prefix_caching), &tiny_stats);
  SchedulerConfig huge_config = TinyPool(mode, prefix_caching);
  huge_config.blocks.num_device_blocks = 1000;
  const auto huge = RunWorkload(huge_config, &huge_stats);

  EXPECT_EQ(huge_stats.num_preempted, 0);
  EXPECT_GT(tiny_stats.num_preempted, 0);
  EXPECT_LE(tiny_stats.max_batched_tokens, 32);
  if (mode == PreemptionMode::kSwap) {
    EXPECT_GT(tiny_stats.num_swap_out_ops, 0);
    EXPECT_EQ(tiny_stats.num_swap_in_ops, tiny_stats.num_swap_out_ops);
  } else {
    EXPECT_EQ(tiny_stats.num_swap_out_ops, 0);
  }
  EXPECT_GT(tiny_stats.num_resumed, 0);
  ASSERT_EQ(tiny.size(), 12u);
  for (const auto& [id, outcome] : tiny) {
    EXPECT_EQ(outcome.tokens, huge.at(id).tokens) << "request " << id;
    EXPECT_EQ(outcome.reason, FinishReason::kLength);
    const int32_t len = 20 + static_cast<int32_t>((id * 7) % 41);
    EXPECT_EQ(outcome.tokens,
              Reference(Prompt(len, id), 20 + id % 11, 1024, kVocab, std::nullopt).tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PreemptionTest,
                         ::testing::Combine(::testing::Values(PreemptionMode::kSwap,
                                                              PreemptionMode::kRecompute),
                                            ::testing::Bool()));

TEST(Preemption, PlansAreDeterministic) {
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    RunStats first, second;
    RunWorkload(TinyPool(mode, true), &first);
    RunWorkload(TinyPool(mode, true), &second);
    EXPECT_GT(first.num_preempted, 0);
    EXPECT_EQ(first.digest, second.digest);
  }
}

TEST(Preemption, SwapFallsBackToRecomputeWithoutHostSpace) {
  SchedulerConfig c = TinyPool(PreemptionMode::kSwap, true);
  c.blocks.num_host_blocks = 0;
  RunStats stats;
  const auto out = RunWorkload(c, &stats);
  EXPECT_GT(stats.num_preempted, 0);
  EXPECT_EQ(stats.num_swap_out_ops, 0);
  for (const auto& [id, outcome] : out) {
    const int32_t len = 20 + static_cast<int32_t>((id * 7) % 41);
    EXPECT_EQ(outcome.tokens,
              Reference(Prompt(len, id), 20 + id % 11, 1024, kVocab, std::nullopt).tokens);
  }
}

TEST(Preemption, VictimIsTheLowestPriorityRequest) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.policy = PriorityPolicy{};
  c.preemption_mode = PreemptionMode::kRecompute;
  c.blocks.num_device_blocks = 6;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  // Each fills two blocks; the first to grow needs a seventh block.
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(31, 1), 10, /*priority=*/1)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(31, 2), 10, /*priority=*/0)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(3, Prompt(31, 3), 10, /*priority=*/2)).ok());
  std::vector<RequestId> preempted;
  while (s->HasPendingWork()) {
    StepPlan plan = driver.Step();
    preempted.insert(preempted.end(), plan.preempted.begin(), plan.preempted.end());
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), 3u);
  for (RequestId id = 1; id <= 3; ++id) {
    EXPECT_EQ(driver.outcomes().at(id).tokens,
              Reference(Prompt(31, id), 10, 1024, kVocab, std::nullopt).tokens);
  }
}

// ---- Abort in every state ---------------------------------------------------------------

class AbortTest : public ::testing::Test {
 protected:
  void Make(PreemptionMode mode) {
    SchedulerConfig c = RoomyConfig();
    c.max_num_batched_tokens = 16;
    c.preemption_mode = mode;
    c.blocks.num_device_blocks = 6;
    c.blocks.num_host_blocks = 8;
    scheduler_ = MakeScheduler(c, &clock_);
    driver_ = std::make_unique<Driver>(*scheduler_, kVocab);
  }
  // Aborts `id`, checks that nothing is held any more and that the next plan reports it.
  void AbortAndCheck(RequestId id) {
    ASSERT_TRUE(scheduler_->AbortRequest(id).ok());
    EXPECT_FALSE(scheduler_->State(id).has_value());
    EXPECT_EQ(scheduler_->AbortRequest(id).code(), absl::StatusCode::kNotFound);
    EXPECT_FALSE(scheduler_->block_manager().HasSequence(id));
    ASSERT_TRUE(scheduler_->CheckInvariants().ok()) << scheduler_->CheckInvariants();
    driver_->Step();
    EXPECT_EQ(driver_->outcomes().at(id).reason, FinishReason::kAbort);
  }
  void ExpectNothingHeld() {
    driver_->RunToCompletion();
    const BlockManagerStats stats = scheduler_->Stats().blocks;
    EXPECT_EQ(stats.num_used_device_blocks, 0);
    EXPECT_EQ(stats.num_free_host_blocks, stats.num_host_blocks);
    EXPECT_EQ(scheduler_->block_manager().NumSequences(), 0);
  }
  // Steps until `id` reaches `state`.
  void StepUntil(RequestId id, RequestState state) {
    for (int i = 0; i < 200 && scheduler_->State(id) != state; ++i) driver_->Step();
    ASSERT_EQ(scheduler_->State(id), state);
  }

  ManualClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Driver> driver_;
};

TEST_F(AbortTest, Waiting) {
  Make(PreemptionMode::kSwap);
  ASSERT_TRUE(scheduler_->AddRequest(Spec(1, Prompt(10, 1), 5)).ok());
  EXPECT_EQ(scheduler_->State(1), RequestState::kWaiting);
  AbortAndCheck(1);
  ExpectNothingHeld();
}

TEST_F(AbortTest, PartiallyPrefilled) {
  Make(PreemptionMode::kSwap);
  ASSERT_TRUE(scheduler_->AddRequest(Spec(1, Prompt(40, 1), 5)).ok());
  driver_->Step();  // 16 of 40 tokens
  EXPECT_EQ(scheduler_->State(1), RequestState::kPrefilling);
  EXPECT_EQ(scheduler_->Stats().blocks.num_used_device_blocks, 1);
  AbortAndCheck(1);
  ExpectNothingHeld();
}

TEST_F(AbortTest, Decoding) {
  Make(PreemptionMode::kSwap);
  ASSERT_TRUE(scheduler_->AddRequest(Spec(1, Prompt(10, 1), 50)).ok());
  StepUntil(1, RequestState::kDecoding);
  driver_->Step();
  AbortAndCheck(1);
  ExpectNothingHeld();
}

TEST_F(AbortTest, BetweenStepAndResult) {
  Make(PreemptionMode::kSwap);
  ASSERT_TRUE(scheduler_->AddRequest(Spec(1, Prompt(10, 1), 50)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(Spec(2, Prompt(5, 2), 3)).ok());
  StepPlan plan = scheduler_->Step();
  ASSERT_TRUE(scheduler_->AbortRequest(1).ok());
  // The engine may still report the aborted request's token; it is dropped.
  EXPECT_TRUE(scheduler_
                  ->OnStepResult(testing::Result(
                      plan.step_id, {testing::Token(1, 1), testing::Token(2, 2)}))
                  .ok());
  EXPECT_THAT(scheduler_->OutputTokens(2), ::testing::ElementsAre(2));
  EXPECT_TRUE(scheduler_->CheckInvariants().ok());
  StepPlan next = scheduler_->Step();
  ASSERT_EQ(next.finished.size(), 1u);
  EXPECT_EQ(next.finished[0].request_id, 1u);
  EXPECT_EQ(next.finished[0].reason, FinishReason::kAbort);
}

// Two requests of 31 prompt tokens growing by up to 40 tokens: they cannot both grow in the
// 6-block pool, so the first one preempts the second.
void FillPoolAndPreemptSecond(Scheduler& s) {
  ASSERT_TRUE(s.AddRequest(Spec(1, Prompt(31, 1), 40)).ok());
  ASSERT_TRUE(s.AddRequest(Spec(2, Prompt(31, 2), 40)).ok());
}

TEST_F(AbortTest, Swapped) {
  Make(PreemptionMode::kSwap);
  FillPoolAndPreemptSecond(*scheduler_);
  StepUntil(2, RequestState::kPreemptedSwapped);
  EXPECT_LT(scheduler_->Stats().blocks.num_free_host_blocks, 8);
  AbortAndCheck(2);
  EXPECT_EQ(scheduler_->Stats().blocks.num_free_host_blocks, 8);
  ExpectNothingHeld();
  EXPECT_EQ(driver_->outcomes().at(1).tokens,
            Reference(Prompt(31, 1), 40, 1024, kVocab, std::nullopt).tokens);
}

TEST_F(AbortTest, PreemptedForRecompute) {
  Make(PreemptionMode::kRecompute);
  FillPoolAndPreemptSecond(*scheduler_);
  StepUntil(2, RequestState::kPreemptedRecompute);
  AbortAndCheck(2);
  ExpectNothingHeld();
}

TEST_F(AbortTest, EverythingAtOnceLeavesAnEmptyPool) {
  Make(PreemptionMode::kSwap);
  FillPoolAndPreemptSecond(*scheduler_);
  ASSERT_TRUE(scheduler_->AddRequest(Spec(3, Prompt(20, 3), 40)).ok());
  StepUntil(2, RequestState::kPreemptedSwapped);
  for (RequestId id = 1; id <= 3; ++id) ASSERT_TRUE(scheduler_->AbortRequest(id).ok());
  ExpectNothingHeld();
  for (RequestId id = 1; id <= 3; ++id) {
    EXPECT_EQ(driver_->outcomes().at(id).reason, FinishReason::kAbort);
  }
}

}  // namespace
}  // namespace xserv::engine
