// Overlap scheduling (SchedulerConfig::overlap_decodes): the next plan is made while the last
// one runs; its decodes go on with a placeholder for the token the running plan samples.
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/test_util.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine {
namespace {

using testing::FindSeq;
using testing::MakeScheduler;
using testing::Prompt;
using testing::RoomyConfig;
using testing::SampleAll;
using testing::Spec;

std::vector<int32_t> Outputs(const Scheduler& s, RequestId id) {
  const std::span<const int32_t> out = s.OutputTokens(id);
  return {out.begin(), out.end()};
}

SchedulerConfig OverlapConfig() {
  SchedulerConfig c = RoomyConfig();
  c.max_in_flight_steps = 2;
  c.overlap_decodes = true;
  return c;
}

// Requests 1 .. max_tokens.size() (prompts of 5 tokens) prefilled, each with output token 11.
void StartDecoding(Scheduler& s, const std::vector<int32_t>& max_tokens) {
  for (size_t i = 0; i < max_tokens.size(); ++i) {
    const RequestId id = i + 1;
    ASSERT_TRUE(s.AddRequest(Spec(id, Prompt(5, static_cast<uint32_t>(id)), max_tokens[i])).ok());
  }
  const StepPlan prefill = s.Step();
  ASSERT_EQ(prefill.seqs.size(), max_tokens.size());
  ASSERT_TRUE(s.OnStepResult(SampleAll(prefill, 11)).ok());
}

TEST(SchedulerOverlap, ConfigNeedsTwoPlansInFlight) {
  SchedulerConfig c = OverlapConfig();
  EXPECT_TRUE(c.Validate().ok());
  c.max_in_flight_steps = 1;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.max_in_flight_steps = 3;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// A prompt's last chunk samples: its first decode is planned while it runs; an earlier chunk
// does not, and the request waits for it.
TEST(SchedulerOverlap, APromptsLastChunkIsContinuedAndEarlierChunksAreNot) {
  SchedulerConfig config = OverlapConfig();
  config.max_num_batched_tokens = 8;
  ManualClock clock;
  auto s = MakeScheduler(config, &clock);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(12, 1), 50)).ok());
  const StepPlan first = s->Step();  // tokens 0..7 of 12: no sample
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_FALSE(first.seqs[0].samples);
  EXPECT_FALSE(s->Step().HasWork());
  ASSERT_TRUE(s->OnStepResult(SampleAll(first, 0)).ok());
  const StepPlan last = s->Step();  // tokens 8..11: samples output 1
  ASSERT_EQ(last.seqs.size(), 1u);
  EXPECT_TRUE(last.seqs[0].samples);
  const StepPlan decode = s->Step();
  ASSERT_EQ(decode.seqs.size(), 1u);
  EXPECT_TRUE(decode.seqs[0].continues);
  EXPECT_EQ(decode.seqs[0].start_position, 12);
  ASSERT_TRUE(s->OnStepResult(SampleAll(last, 11)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(decode, 12)).ok());
  EXPECT_EQ(Outputs(*s, 1), (std::vector<int32_t>{11, 12}));
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerOverlap, DecodesContinueWithAPlaceholderAfterTheRunningPlan) {
  ManualClock clock;
  auto s = MakeScheduler(OverlapConfig(), &clock);
  StartDecoding(*s, {50, 50});
  const StepPlan b = s->Step();  // decodes of the sampled tokens
  ASSERT_EQ(b.seqs.size(), 2u);
  for (const ScheduledSequence& seq : b.seqs) {
    EXPECT_FALSE(seq.continues);
    EXPECT_EQ(seq.token_ids, std::vector<int32_t>{11});
  }
  ASSERT_TRUE(s->CanStep());
  const StepPlan c = s->Step();  // while b runs
  ASSERT_EQ(c.seqs.size(), 2u);
  for (const ScheduledSequence& seq : c.seqs) {
    const ScheduledSequence* before = FindSeq(b, seq.request_id);
    ASSERT_NE(before, nullptr);
    EXPECT_TRUE(seq.continues);
    EXPECT_TRUE(seq.samples);
    EXPECT_EQ(seq.token_ids, std::vector<int32_t>{kPendingToken});
    EXPECT_EQ(seq.start_position, before->start_position + 1);
    EXPECT_EQ(seq.num_computed_tokens_after, before->num_computed_tokens_after + 1);
  }
  EXPECT_FALSE(s->CanStep());
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();

  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12)).ok());
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  const StepPlan d = s->Step();  // while c runs: continues c
  for (const ScheduledSequence& seq : d.seqs) {
    EXPECT_TRUE(seq.continues);
    EXPECT_EQ(seq.start_position, FindSeq(c, seq.request_id)->start_position + 1);
  }
  ASSERT_TRUE(s->OnStepResult(SampleAll(c, 13)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(d, 14)).ok());
  EXPECT_EQ(Outputs(*s, 1), (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(Outputs(*s, 2), (std::vector<int32_t>{11, 12, 13, 14}));
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerOverlap, AStopDropsTheContinuedRowAndFreesTheBlocks) {
  ManualClock clock;
  auto s = MakeScheduler(OverlapConfig(), &clock);
  StartDecoding(*s, {50, 50});
  const StepPlan b = s->Step();
  const StepPlan c = s->Step();
  ASSERT_NE(FindSeq(c, 1), nullptr);
  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12, /*stop_id=*/1)).ok());
  EXPECT_FALSE(s->State(1).has_value());  // ended now, reported by the next plan
  const StepPlan d = s->Step();
  ASSERT_EQ(d.finished.size(), 1u);
  EXPECT_EQ(d.finished[0].request_id, 1u);
  EXPECT_EQ(d.finished[0].reason, FinishReason::kStop);
  EXPECT_EQ(d.finished[0].num_output_tokens, 2);
  EXPECT_EQ(FindSeq(d, 1), nullptr);
  // c's row for request 1 still comes back (the device ran it); it is dropped.
  ASSERT_TRUE(s->OnStepResult(SampleAll(c, 13)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(d, 14)).ok());
  EXPECT_EQ(Outputs(*s, 2), (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(s->block_manager().NumSequences(), 1);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerOverlap, TheLastTokenByLengthIsNeverContinued) {
  ManualClock clock;
  auto s = MakeScheduler(OverlapConfig(), &clock);
  StartDecoding(*s, {/*max_tokens=*/3});  // output 1 sampled
  const StepPlan b = s->Step();                             // samples output 2
  const StepPlan c = s->Step();                             // continued: samples output 3
  ASSERT_NE(FindSeq(c, 1), nullptr);
  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12)).ok());
  // c's token is the request's last: nothing may follow it.
  const StepPlan d = s->Step();
  EXPECT_EQ(FindSeq(d, 1), nullptr);
  ASSERT_TRUE(s->OnStepResult(SampleAll(c, 13)).ok());
  const StepPlan e = s->Step();
  ASSERT_EQ(e.finished.size(), 1u);
  EXPECT_EQ(e.finished[0].reason, FinishReason::kLength);
  EXPECT_EQ(e.finished[0].num_output_tokens, 3);
  EXPECT_EQ(s->block_manager().NumSequences(), 0);
}

// The pool is short for the first request's continuation: the requests ranked below it are
// not continued either, and once the results are back the back of the queue is preempted for
// it, as without overlap.
TEST(SchedulerOverlap, AContinuationShortOfBlocksStopsTheOnesBelowIt) {
  SchedulerConfig config = OverlapConfig();
  config.blocks.block_size = 4;
  config.blocks.num_device_blocks = 3;
  config.blocks.num_host_blocks = 0;
  config.blocks.enable_prefix_caching = false;
  ManualClock clock;
  auto s = MakeScheduler(config, &clock);
  ASSERT_TRUE(s->AddRequest(Spec(1, Prompt(3, 1), 50)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(2, Prompt(2, 2), 50)).ok());
  ASSERT_TRUE(s->AddRequest(Spec(3, Prompt(2, 3), 50)).ok());
  const StepPlan prefill = s->Step();  // one block each
  ASSERT_EQ(prefill.seqs.size(), 3u);
  ASSERT_TRUE(s->OnStepResult(SampleAll(prefill, 11)).ok());
  const StepPlan b = s->Step();  // positions 3, 2, 2: no new block
  ASSERT_EQ(b.seqs.size(), 3u);
  // Request 1's next position (4) needs a block and none is free; 2 and 3 would not need one.
  const StepPlan c = s->Step();
  EXPECT_FALSE(c.HasWork());
  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12)).ok());
  const StepPlan d = s->Step();
  EXPECT_EQ(d.preempted, std::vector<RequestId>{3});
  ASSERT_NE(FindSeq(d, 1), nullptr);
  EXPECT_FALSE(FindSeq(d, 1)->continues);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerOverlap, AnIdIsNotReusedWhileItsStepIsInFlight) {
  ManualClock clock;
  auto s = MakeScheduler(OverlapConfig(), &clock);
  StartDecoding(*s, {50});
  const StepPlan b = s->Step();
  ASSERT_TRUE(s->AbortRequest(1).ok());
  EXPECT_EQ(s->AddRequest(Spec(1, Prompt(5, 9), 50)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12)).ok());
  EXPECT_TRUE(s->AddRequest(Spec(1, Prompt(5, 9), 50)).ok());
}

TEST(SchedulerOverlap, AbortWhileBothPlansRunKeepsTheirResultsAcceptable) {
  ManualClock clock;
  auto s = MakeScheduler(OverlapConfig(), &clock);
  StartDecoding(*s, {50});
  const StepPlan b = s->Step();
  const StepPlan c = s->Step();
  ASSERT_TRUE(s->AbortRequest(1).ok());
  EXPECT_EQ(s->block_manager().NumSequences(), 0);  // freed at once; plans run in order
  ASSERT_TRUE(s->OnStepResult(SampleAll(b, 12)).ok());
  ASSERT_TRUE(s->OnStepResult(SampleAll(c, 13)).ok());
  const StepPlan d = s->Step();
  ASSERT_EQ(d.finished.size(), 1u);
  EXPECT_EQ(d.finished[0].reason, FinishReason::kAbort);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

}  // namespace
}  // namespace xserv::engine
