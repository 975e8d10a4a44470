// Several plans outstanding at once (SchedulerConfig::max_in_flight_steps > 1), as the leader of
// a pipeline-parallel replica keeps them: plans split the live requests, results come back in
// plan order, outstanding requests are never preempted, and aborts while in flight are safe.
#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/fake_model.h"
#include "tests/unit/engine/test_util.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine {
namespace {

using testing::Driver;
using testing::FindSeq;
using testing::kVocab;
using testing::MakeScheduler;
using testing::Prompt;
using testing::Reference;
using testing::RoomyConfig;
using testing::SampleAll;
using testing::Spec;

std::set<RequestId> Ids(const StepPlan& plan) {
  std::set<RequestId> ids;
  for (const ScheduledSequence& s : plan.seqs) ids.insert(s.request_id);
  return ids;
}

TEST(SchedulerPipeline, ConfigRefusesZeroAndHugeDepths) {
  SchedulerConfig c = RoomyConfig();
  c.max_in_flight_steps = 0;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.max_in_flight_steps = 65;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.max_in_flight_steps = 2;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(SchedulerPipeline, OutstandingPlansSplitTheRequestsAndResultsComeBackInOrder) {
  SchedulerConfig c = RoomyConfig();
  c.max_in_flight_steps = 2;
  ManualClock clock;
  auto s = MakeScheduler(c, &clock);
  for (RequestId id = 1; id <= 6; ++id) ASSERT_TRUE(s->AddRequest(Spec(id, Prompt(5, id), 50)).ok());

  StepPlan a = s->Step();
  EXPECT_EQ(a.seqs.size(), 3u);  // half of the six live requests
  ASSERT_TRUE(s->CanStep());
  StepPlan b = s->Step();
  EXPECT_EQ(b.seqs.size(), 3u);
  std::set<RequestId> both = Ids(a);
  for (RequestId id : Ids(b)) EXPECT_TRUE(both.insert(id).second) << "request " << id << " twice";
  EXPECT_EQ(both.size(), 6u);
  EXPECT_FALSE(s->CanStep());
  EXPECT_EQ(s->num_steps_in_flight(), 2);
  EXPECT_EQ(s->Stats().num_overlapped_steps_total, 1u);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();

  // Results in plan order only.
  EXPECT_EQ(s->OnStepResult(SampleAll(b)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->OnStepResult(SampleAll(a)).ok());
  ASSERT_TRUE(s->CanStep());
  // a's requests come back (decoding now); b's are still out.
  StepPlan next = s->Step();
  EXPECT_EQ(Ids(next), Ids(a));
  for (const ScheduledSequence& seq : next.seqs) EXPECT_EQ(seq.token_ids.size(), 1u);
  ASSERT_TRUE(s->OnStepResult(SampleAll(b)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(next)).ok());
  EXPECT_EQ(s->num_steps_in_flight(), 0);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerPipeline, OneStepAtATimeByDefault) {
  ManualClock clock;
  auto s = MakeScheduler(RoomyConfig(), &clock);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(5, 1), 5)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(5, 2), 5)).ok());
  StepPlan a = s->Step();
  EXPECT_EQ(a.seqs.size(), 2u);
  EXPECT_FALSE(s->CanStep());
  ASSERT_TRUE(s->OnStepResult(SampleAll(a)).ok());
  EXPECT_EQ(s->Stats().num_overlapped_steps_total, 0u);
}

TEST(SchedulerPipeline, AbortWhileInFlightDropsTheResultAndFreesTheBlocks) {
  SchedulerConfig c = RoomyConfig();
  c.max_in_flight_steps = 2;
  ManualClock clock;
  auto s = MakeScheduler(c, &clock);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(20, 1), 50)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(20, 2), 50)).ok());
  StepPlan a = s->Step();
  ASSERT_EQ(a.seqs.size(), 1u);
  const RequestId victim = a.seqs[0].request_id;
  ASSERT_TRUE(s->AbortRequest(victim).ok());
  StepPlan b = s->Step();  // reports the abort; schedules the other request
  ASSERT_EQ(b.finished.size(), 1u);
  EXPECT_EQ(b.finished[0].request_id, victim);
  EXPECT_EQ(b.finished[0].reason, FinishReason::kAbort);
  EXPECT_EQ(FindSeq(b, victim), nullptr);
  // The late token of the aborted request is dropped, not an error.
  ASSERT_TRUE(s->OnStepResult(SampleAll(a)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(b)).ok());
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  EXPECT_EQ(s->block_manager().NumSequences(), 1);
}

// A pool too small for every request: preemption happens, but never to a request whose plan is
// still out (its KV is being written), and every stream equals the unconstrained reference.
TEST(SchedulerPipeline, TightPoolPreemptsOnlyRequestsNotInFlight) {
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    SchedulerConfig c = RoomyConfig();
    c.max_in_flight_steps = 3;
    c.max_num_batched_tokens = 32;
    c.preemption_mode = mode;
    c.blocks.num_device_blocks = 12;
    c.blocks.num_host_blocks = 16;
    ManualClock clock;
    auto s = MakeScheduler(c, &clock);
    Driver driver(*s, kVocab);
    for (RequestId id = 1; id <= 8; ++id) {
      ASSERT_TRUE(s->AddRequest(Spec(id, Prompt(10 + static_cast<int32_t>(id) * 3, id), 30)).ok());
    }
    int preempted = 0;
    for (int i = 0; i < 5000 && s->HasPendingWork(); ++i) {
      const std::vector<RequestId> out = driver.OutstandingIds();
      const StepPlan plan = driver.Step();
      for (RequestId id : plan.preempted) {
        EXPECT_EQ(std::count(out.begin(), out.end(), id), 0) << "request " << id
                                                             << " preempted in flight";
      }
      preempted += static_cast<int>(plan.preempted.size());
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    }
    ASSERT_FALSE(s->HasPendingWork());
    EXPECT_GT(preempted, 0);
    EXPECT_GT(s->Stats().num_overlapped_steps_total, 0u);
    for (RequestId id = 1; id <= 8; ++id) {
      const testing::Outcome want = Reference(Prompt(10 + static_cast<int32_t>(id) * 3, id), 30,
                                              c.max_model_len, kVocab, std::nullopt);
      EXPECT_EQ(driver.outcome(id).tokens, want.tokens) << "request " << id;
    }
    EXPECT_EQ(s->Stats().blocks.num_used_device_blocks, 0);
  }
}

}  // namespace
}  // namespace xserv::engine
