#include "worker/engine/scheduler.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/fake_model.h"
#include "tests/unit/engine/test_util.h"

namespace xserv::engine {
namespace {

using testing::Driver;
using testing::FindSeq;
using testing::kVocab;
using testing::MakeScheduler;
using testing::Prompt;
using testing::Reference;
using testing::Result;
using testing::Token;
using testing::RoomyConfig;
using testing::Spec;

void ExpectMatchesReference(const Driver& driver, RequestId id, const std::vector<int32_t>& prompt,
                            int32_t max_tokens, int32_t max_model_len) {
  const testing::Outcome want = Reference(prompt, max_tokens, max_model_len, kVocab, std::nullopt);
  const testing::Outcome& got = driver.outcomes().at(id);
  EXPECT_EQ(got.tokens, want.tokens) << "request " << id;
  EXPECT_EQ(got.reason, want.reason) << "request " << id;
}

TEST(SchedulerConfig, RejectsBadValues) {
  SchedulerConfig c = RoomyConfig();
  EXPECT_TRUE(c.Validate().ok());
  c.max_num_seqs = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = RoomyConfig();
  c.enable_chunked_prefill = false;  // budget 64 < max_model_len 1024
  EXPECT_FALSE(c.Validate().ok());
  c = RoomyConfig();
  c.blocks.num_device_blocks = 0;
  EXPECT_FALSE(c.Validate().ok());
  ManualClock clock;
  EXPECT_FALSE(Scheduler::Create(c, &clock).ok());
}

// --max-num-batched-tokens 0: vLLM's split by device memory (8192 from 70 GiB: H100, H200).
TEST(SchedulerConfig, DefaultStepTokenBudgetFollowsDeviceMemory) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(DefaultStepTokenBudget(0), 2048);  // the CPU backend
  EXPECT_EQ(DefaultStepTokenBudget(24 * kGiB), 2048);
  EXPECT_EQ(DefaultStepTokenBudget(70 * kGiB - 1), 2048);
  EXPECT_EQ(DefaultStepTokenBudget(70 * kGiB), 8192);
  EXPECT_EQ(DefaultStepTokenBudget(uint64_t{150} * kGiB), 8192);  // an H200's 139.8
}

TEST(Scheduler, AddRequestValidates) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.max_model_len = 32;
  auto s = MakeScheduler(c, &clock);
  EXPECT_EQ(s->AddRequest(Spec(1, {}, 4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest(Spec(1, {1, 2}, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->AddRequest(Spec(1, Prompt(32, 1), 4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->AddRequest(Spec(1, Prompt(31, 1), 4)).ok());
  EXPECT_EQ(s->AddRequest(Spec(1, Prompt(3, 1), 4)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s->AbortRequest(77).code(), absl::StatusCode::kNotFound);
}

TEST(Scheduler, EmptySchedulerPlansNothing) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  StepPlan plan = s->Step();
  EXPECT_FALSE(plan.HasWork());
  EXPECT_TRUE(s->OnStepResult(Result(plan.step_id)).ok());
  EXPECT_FALSE(s->HasPendingWork());
}

TEST(Scheduler, ChunkedPrefillSplitsLongPromptsAndMixesWithDecodes) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.max_num_batched_tokens = 32;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  const auto short_prompt = Prompt(8, 1);
  const auto long_prompt = Prompt(100, 2);
  ASSERT_TRUE(s->AddRequest(Spec(1, short_prompt, 20)).ok());
  StepPlan first = driver.Step();
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_TRUE(first.seqs[0].is_new);
  EXPECT_TRUE(first.seqs[0].samples);
  EXPECT_EQ(first.seqs[0].token_ids, short_prompt);

  ASSERT_TRUE(s->AddRequest(Spec(2, long_prompt, 5)).ok());
  int32_t next_position = 0;
  bool saw_mixed_step = false;
  while (s->HasPendingWork()) {
    StepPlan plan = driver.Step();
    int32_t total = 0;
    for (const auto& seq : plan.seqs) total += static_cast<int32_t>(seq.token_ids.size());
    EXPECT_EQ(total, plan.num_batched_tokens);
    EXPECT_LE(plan.num_batched_tokens, 32);
    const ScheduledSequence* decode = FindSeq(plan, 1);
    const ScheduledSequence* prefill = FindSeq(plan, 2);
    if (decode != nullptr) {
      EXPECT_EQ(decode->token_ids.size(), 1u);
    }
    if (prefill != nullptr && next_position < 100) {
      EXPECT_EQ(prefill->start_position, next_position);
      EXPECT_EQ(prefill->is_new, next_position == 0);
      next_position = prefill->num_computed_tokens_after;
      // Only the final chunk yields a token.
      EXPECT_EQ(prefill->samples, next_position == 100);
      EXPECT_GE(static_cast<int32_t>(prefill->block_table.size()) * 16, next_position);
      if (decode != nullptr) {
        saw_mixed_step = true;
        EXPECT_EQ(plan.seqs.front().request_id, 1u);  // decodes come first
      }
    }
    ASSERT_TRUE(s->CheckInvariants().ok());
  }
  EXPECT_EQ(next_position, 100);
  EXPECT_TRUE(saw_mixed_step);
  ExpectMatchesReference(driver, 1, short_prompt, 20, c.max_model_len);
  ExpectMatchesReference(driver, 2, long_prompt, 5, c.max_model_len);
}

TEST(Scheduler, LongPrefillThresholdCapsEachChunk) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.long_prefill_token_threshold = 8;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(30, 1), 1)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(30, 2), 1)).ok());
  StepPlan plan = driver.Step();
  ASSERT_EQ(plan.seqs.size(), 2u);  // both start: one prompt cannot hog the budget
  for (const auto& seq : plan.seqs) EXPECT_EQ(seq.token_ids.size(), 8u);
  driver.RunToCompletion();
}

// max_waiting_steps: with a request running, new ones wait until that many steps have passed
// since the last admission (then start together), or until what waits fills the step's budget;
// nothing running admits at once; 0 admits at every step. Outputs are unchanged.
TEST(Scheduler, MaxWaitingStepsBatchesAdmissions) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.max_waiting_steps = 3;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  const auto first = Prompt(8, 1);
  ASSERT_TRUE(s->AddRequest(Spec(1, first, 30)).ok());
  StepPlan plan = driver.Step();  // step 1: nothing ran, so request 1 starts at once
  ASSERT_NE(FindSeq(plan, 1), nullptr);
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(5, 2), 4)).ok());
  plan = driver.Step();  // step 2: one step since the last admission
  EXPECT_EQ(FindSeq(plan, 2), nullptr);
  ASSERT_TRUE(s->AddRequest(Spec(3, Prompt(6, 3), 4)).ok());
  plan = driver.Step();  // step 3: two
  EXPECT_EQ(FindSeq(plan, 2), nullptr);
  EXPECT_EQ(FindSeq(plan, 3), nullptr);
  EXPECT_EQ(plan.seqs.size(), 1u);  // request 1 decodes meanwhile
  plan = driver.Step();  // step 4: three steps: both start together
  ASSERT_NE(FindSeq(plan, 2), nullptr);
  ASSERT_NE(FindSeq(plan, 3), nullptr);
  EXPECT_TRUE(FindSeq(plan, 2)->is_new);
  // A prompt that fills the step's budget (64 tokens, 1 taken by the decode) starts at once.
  plan = driver.Step();  // step 5
  const auto big = Prompt(70, 4);
  ASSERT_TRUE(s->AddRequest(Spec(4, big, 2)).ok());
  plan = driver.Step();  // step 6: one step after the last admission, but the budget is full
  ASSERT_NE(FindSeq(plan, 4), nullptr);
  ASSERT_TRUE(s->CheckInvariants().ok());
  driver.RunToCompletion();
  ExpectMatchesReference(driver, 1, first, 30, c.max_model_len);
  ExpectMatchesReference(driver, 4, big, 2, c.max_model_len);

  c.max_waiting_steps = -1;
  EXPECT_FALSE(c.Validate().ok());
}

// A step that carries a prefill chunk replays no graph anyway: waiting requests join it at once.
TEST(Scheduler, MaxWaitingStepsAdmitsIntoAStepThatPrefillsAnyway) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();  // 64-token budget
  c.max_waiting_steps = 10;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(100, 1), 4)).ok());
  StepPlan plan = driver.Step();  // step 1: the first 64 prompt tokens
  ASSERT_NE(FindSeq(plan, 1), nullptr);
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(5, 2), 4)).ok());
  plan = driver.Step();  // step 2: request 1's last 36 prompt tokens, and request 2 joins
  ASSERT_NE(FindSeq(plan, 1), nullptr);
  EXPECT_EQ(FindSeq(plan, 1)->token_ids.size(), 36u);
  ASSERT_NE(FindSeq(plan, 2), nullptr);
  EXPECT_TRUE(FindSeq(plan, 2)->is_new);
  driver.RunToCompletion();
}

TEST(Scheduler, WithoutChunkingPromptsAreScheduledWhole) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.enable_chunked_prefill = false;
  c.max_model_len = 64;
  c.max_num_batched_tokens = 64;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(40, 1), 3)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(40, 2), 3)).ok());
  StepPlan plan = driver.Step();
  ASSERT_EQ(plan.seqs.size(), 1u);  // the second does not fit in what is left: it waits whole
  EXPECT_EQ(plan.seqs[0].token_ids.size(), 40u);
  plan = driver.Step();
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(FindSeq(plan, 2)->token_ids.size(), 40u);
  driver.RunToCompletion();
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.max_num_seqs = 2;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  for (RequestId id = 1; id <= 5; ++id) ASSERT_TRUE(s->AddRequest(Spec(id, Prompt(10, id), 6)).ok());
  while (s->HasPendingWork()) {
    StepPlan plan = driver.Step();
    EXPECT_LE(plan.seqs.size(), 2u);
    EXPECT_LE(s->Stats().num_running, 2);
  }
  for (RequestId id = 1; id <= 5; ++id) ExpectMatchesReference(driver, id, Prompt(10, id), 6, 1024);
}

std::vector<RequestId> AdmissionOrder(const SchedulerConfig& c,
                                      const std::vector<std::pair<RequestId, int32_t>>& reqs) {
  ManualClock clock;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  for (const auto& [id, priority] : reqs) {
    EXPECT_TRUE(s->AddRequest(Spec(id, Prompt(5, id), 2, priority)).ok());
    clock.Advance(std::chrono::milliseconds(1));
  }
  std::vector<RequestId> order;
  while (s->HasPendingWork()) {
    for (const auto& seq : driver.Step().seqs) {
      if (seq.is_new) order.push_back(seq.request_id);
    }
  }
  return order;
}

TEST(Scheduler, FcfsAdmitsInArrivalOrderIgnoringPriority) {
  SchedulerConfig c = RoomyConfig();
  c.max_num_seqs = 1;
  EXPECT_THAT(AdmissionOrder(c, {{1, 5}, {2, 1}, {3, 3}}), ::testing::ElementsAre(1, 2, 3));
}

TEST(Scheduler, PriorityAdmitsLowerValueFirstTiesInArrivalOrder) {
  SchedulerConfig c = RoomyConfig();
  c.max_num_seqs = 1;
  c.policy = PriorityPolicy{};
  EXPECT_THAT(AdmissionOrder(c, {{1, 5}, {2, 1}, {3, 3}, {4, 1}}),
              ::testing::ElementsAre(2, 4, 3, 1));
}

TEST(Scheduler, PrefixCacheReusesFullBlocksOfAFinishedRequest) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  Driver driver(*s, kVocab);
  const auto a = Prompt(40, 7);
  auto b = a;
  const auto tail = Prompt(8, 8);
  b.insert(b.end(), tail.begin(), tail.end());
  ASSERT_TRUE(s->AddRequest(Spec(1, a, 1)).ok());
  driver.RunToCompletion();
  ASSERT_TRUE(s->AddRequest(Spec(2, b, 4)).ok());
  StepPlan plan = driver.Step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_cached_tokens, 32);
  EXPECT_EQ(plan.seqs[0].start_position, 32);
  EXPECT_EQ(plan.seqs[0].token_ids.size(), 16u);  // only uncached tokens are fed (and budgeted)
  EXPECT_EQ(plan.num_batched_tokens, 16);
  driver.RunToCompletion();
  // Correct output proves the reused blocks held the right KV.
  ExpectMatchesReference(driver, 2, b, 4, 1024);
  EXPECT_EQ(s->Stats().blocks.prefix_hit_tokens, 32u);
  EXPECT_EQ(s->Stats().blocks.prefix_query_tokens, 40u + 48u);
}

TEST(Scheduler, PrefixCacheSharesBlocksWithARunningRequest) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  Driver driver(*s, kVocab);
  const auto a = Prompt(40, 7);
  auto b = a;
  b.push_back(5);
  ASSERT_TRUE(s->AddRequest(Spec(1, a, 10)).ok());
  StepPlan p1 = driver.Step();
  ASSERT_TRUE(s->AddRequest(Spec(2, b, 10)).ok());
  StepPlan p2 = driver.Step();
  const ScheduledSequence* seq_b = FindSeq(p2, 2);
  ASSERT_NE(seq_b, nullptr);
  EXPECT_EQ(seq_b->num_cached_tokens, 32);
  const auto& table_a = p1.seqs[0].block_table;
  EXPECT_EQ(seq_b->block_table[0], table_a[0]);
  EXPECT_EQ(seq_b->block_table[1], table_a[1]);
  EXPECT_EQ(s->block_manager().RefCount(table_a[0]), 2);
  EXPECT_EQ(s->block_manager().RefCount(table_a[2]), 1);
  driver.RunToCompletion();
  ExpectMatchesReference(driver, 1, a, 10, 1024);
  ExpectMatchesReference(driver, 2, b, 10, 1024);
}

TEST(Scheduler, OptingOutOfThePrefixCacheComputesEveryToken) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  Driver driver(*s, kVocab);
  const auto a = Prompt(40, 7);
  ASSERT_TRUE(s->AddRequest(Spec(1, a, 1)).ok());
  driver.RunToCompletion();
  RequestSpec spec = Spec(2, a, 1);
  spec.use_prefix_cache = false;  // e.g. prompt logprobs requested
  ASSERT_TRUE(s->AddRequest(std::move(spec)).ok());
  StepPlan plan = driver.Step();
  EXPECT_EQ(plan.seqs[0].num_cached_tokens, 0);
  EXPECT_EQ(plan.seqs[0].start_position, 0);
}

TEST(Scheduler, TightPoolEvictsCachedBlocksInsteadOfFailing) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.blocks.num_device_blocks = 6;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  for (RequestId id = 1; id <= 6; ++id) {
    ASSERT_TRUE(s->AddRequest(Spec(id, Prompt(48, id), 2)).ok());
    driver.RunToCompletion();
    ExpectMatchesReference(driver, id, Prompt(48, id), 2, 1024);
  }
  const BlockManagerStats stats = s->Stats().blocks;
  EXPECT_GT(stats.num_evictions, 0u);
  EXPECT_EQ(stats.num_used_device_blocks, 0);
  EXPECT_GT(stats.num_cached_blocks, 0);
  // The most recent prompt is still cached; the first was evicted.
  ASSERT_TRUE(s->AddRequest(Spec(7, Prompt(48, 6), 1)).ok());
  EXPECT_EQ(driver.Step().seqs[0].num_cached_tokens, 32);
  driver.RunToCompletion();
  ASSERT_TRUE(s->AddRequest(Spec(8, Prompt(48, 1), 1)).ok());
  EXPECT_EQ(driver.Step().seqs[0].num_cached_tokens, 0);
  driver.RunToCompletion();
}

TEST(Scheduler, StopFromTheEngineEndsTheRequest) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  const auto prompt = Prompt(10, 3);
  const int32_t eos = testing::NextToken(prompt, kVocab);  // the very first token is EOS
  Driver driver(*s, kVocab, eos);
  ASSERT_TRUE(s->AddRequest(Spec(1, prompt, 50)).ok());
  driver.RunToCompletion();
  EXPECT_EQ(driver.outcomes().at(1).reason, FinishReason::kStop);
  EXPECT_EQ(driver.outcomes().at(1).tokens.size(), 1u);
}

TEST(Scheduler, MaxModelLenEndsWithLength) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.max_model_len = 20;
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(15, 3), 100)).ok());
  driver.RunToCompletion();
  EXPECT_EQ(driver.outcomes().at(1).reason, FinishReason::kLength);
  EXPECT_EQ(driver.outcomes().at(1).tokens.size(), 5u);
}

TEST(Scheduler, PromptLargerThanThePoolFinishesWithAnError) {
  ManualClock clock;
  SchedulerConfig c = RoomyConfig();
  c.blocks.num_device_blocks = 4;  // 64 tokens
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(100, 1), 4)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(10, 2), 4)).ok());
  driver.RunToCompletion(50);
  EXPECT_EQ(driver.outcomes().at(1).reason, FinishReason::kError);
  EXPECT_THAT(driver.outcomes().at(1).message, ::testing::HasSubstr("KV blocks"));
  ExpectMatchesReference(driver, 2, Prompt(10, 2), 4, 1024);  // the queue kept moving
}

TEST(Scheduler, SequenceOutgrowingThePoolFinishesWithAnError) {
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    ManualClock clock;
    SchedulerConfig c = RoomyConfig();
    c.blocks.num_device_blocks = 4;
    c.preemption_mode = mode;
    auto s = MakeScheduler(c, &clock);
    Driver driver(*s, kVocab);
    ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(60, 1), 100)).ok());
    driver.RunToCompletion(200);
    const testing::Outcome& got = driver.outcomes().at(1);
    EXPECT_EQ(got.reason, FinishReason::kError);
    // Tokens 61..64 fit; the one that needs a fifth block cannot be computed.
    const auto want = Reference(Prompt(60, 1), 100, 1024, kVocab, std::nullopt);
    ASSERT_EQ(got.tokens.size(), 5u);
    EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.tokens.begin()));
    EXPECT_EQ(s->Stats().blocks.num_used_device_blocks, 0);
  }
}

TEST(Scheduler, ResultsAreValidated) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(5, 1), 3)).ok());
  StepPlan plan = s->Step();
  EXPECT_FALSE(s->OnStepResult(Result(plan.step_id + 1, {Token(1, 3)})).ok());
  EXPECT_FALSE(s->OnStepResult(Result(plan.step_id)).ok());  // token missing
  EXPECT_FALSE(s->OnStepResult(Result(plan.step_id, {Token(1, 3), Token(1, 4)})).ok());
  EXPECT_TRUE(s->OnStepResult(Result(plan.step_id, {Token(1, 3)})).ok());
  EXPECT_THAT(s->OutputTokens(1), ::testing::ElementsAre(3));
}

TEST(Scheduler, PayloadAndStatsAreReported) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  RequestSpec spec = Spec(1, Prompt(5, 1), 2);
  spec.payload = std::string("sampling");
  ASSERT_TRUE(s->AddRequest(std::move(spec)).ok());
  ASSERT_NE(s->Payload(1), nullptr);
  EXPECT_EQ(std::any_cast<std::string>(*s->Payload(1)), "sampling");
  EXPECT_EQ(s->Stats().num_waiting, 1);
  Driver driver(*s, kVocab);
  driver.RunToCompletion();
  EXPECT_EQ(s->Payload(1), nullptr);
  const SchedulerStats stats = s->Stats();
  EXPECT_EQ(stats.num_prompt_tokens_total, 5u);
  EXPECT_EQ(stats.num_generation_tokens_total, 2u);
  EXPECT_EQ(stats.num_running + stats.num_waiting + stats.num_swapped, 0);
}

// Sliding-window layers (BlockManagerConfig::window_tokens): each plan's table carries the window
// table after the full one; the window keeps only the blocks its queries read.
SchedulerConfig WindowConfig(int32_t device_blocks) {
  SchedulerConfig c = RoomyConfig();
  c.max_num_batched_tokens = 32;
  c.blocks.enable_prefix_caching = false;
  c.blocks.window_tokens = 32;
  c.blocks.num_device_blocks = device_blocks;
  return c;
}

TEST(Scheduler, WindowTableHoldsOnlyTheWindowsBlocks) {
  ManualClock clock;
  // 40 + 200 tokens: 15 full blocks, and at most 5 window blocks (a 32-token chunk over a
  // 32-token window spans 63 positions, 4 blocks, plus one for a block boundary).
  const SchedulerConfig c = WindowConfig(20);
  auto s = MakeScheduler(c, &clock);
  Driver driver(*s, kVocab);
  const auto prompt = Prompt(40, 1);
  ASSERT_TRUE(s->AddRequest(Spec(1, prompt, 200)).ok());
  bool saw_released = false;
  while (s->HasPendingWork()) {
    const StepPlan plan = driver.Step();
    for (const ScheduledSequence& seq : plan.seqs) {
      ASSERT_EQ(seq.block_table.size() % 2, 0u);
      const size_t n = seq.block_table.size() / 2;
      const int32_t end = seq.num_computed_tokens_after;
      ASSERT_GE(static_cast<int32_t>(n) * 16, end);
      // Every block this step's queries read or write is held.
      const int32_t first_key = std::max(0, seq.start_position - 31);
      int32_t held = 0;
      for (size_t j = 0; j < n; ++j) {
        const BlockId b = seq.block_table[n + j];
        const bool read = static_cast<int32_t>(j) >= first_key / 16 &&
                          static_cast<int32_t>(j) * 16 < end;
        if (read) {
          EXPECT_NE(b, kReleasedBlock) << "block " << j << " at " << seq.start_position;
        }
        if (b == kReleasedBlock) {
          saw_released = true;
        } else {
          ++held;
        }
      }
      // The window plus this step's tokens, one block of slack for a boundary and one for the
      // step in flight whose results have not released its predecessor's blocks yet.
      const int32_t chunk = static_cast<int32_t>(seq.token_ids.size());
      EXPECT_LE(held, (32 + chunk - 1 + 15) / 16 + 2) << "at " << seq.start_position;
    }
    ASSERT_TRUE(s->CheckInvariants().ok());
  }
  EXPECT_TRUE(saw_released);
  ExpectMatchesReference(driver, 1, prompt, 200, c.max_model_len);
  EXPECT_EQ(s->Stats().blocks.num_used_device_blocks, 0);
}

TEST(Scheduler, WindowTableCountsTowardsThePool) {
  ManualClock clock;
  // A 100-token prompt: 7 full blocks, and its 32-token chunks over the window up to 5 more.
  auto s = MakeScheduler(WindowConfig(11), &clock);
  Driver driver(*s, kVocab);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(100, 1), 4)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(10, 2), 4)).ok());
  driver.RunToCompletion(50);
  EXPECT_EQ(driver.outcomes().at(1).reason, FinishReason::kError);
  EXPECT_THAT(driver.outcomes().at(1).message, ::testing::HasSubstr("needs 12 KV blocks"));
  ExpectMatchesReference(driver, 2, Prompt(10, 2), 4, 1024);
  SchedulerConfig cached = WindowConfig(20);
  cached.blocks.enable_prefix_caching = true;
  EXPECT_FALSE(cached.Validate().ok());
}

}  // namespace
}  // namespace xserv::engine
