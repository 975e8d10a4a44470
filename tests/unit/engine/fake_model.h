// FakeModel and Driver: test doubles that run StepPlans against simulated KV memory.
//
// FakeModel keeps one token id per KV slot (device and host pools), executes a plan's swap and
// copy ops in the documented order, writes each scheduled token into its slot through the block
// table, and samples the next token as a hash of the context it reads back through the block
// table. The "model" is therefore a pure function of a sequence's own tokens — but only if the
// scheduler's block tables, copies, swaps and prefix-cache hits are right: any KV bookkeeping
// error changes the output. Single-threaded test code.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/test_util.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine::testing {

inline int32_t NextToken(std::span<const int32_t> context, int32_t vocab) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  h ^= h >> 29;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

class FakeModel {
 public:
  FakeModel(const BlockManagerConfig& blocks, int32_t vocab, std::optional<int32_t> eos)
      : block_size_(blocks.block_size),
        vocab_(vocab),
        eos_(eos),
        device_(static_cast<size_t>(blocks.num_device_blocks) * blocks.block_size, -1),
        host_(static_cast<size_t>(blocks.num_host_blocks) * blocks.block_size, -1) {}

  StepResult Execute(const StepPlan& plan) {
    for (const BlockSwap& op : plan.swap_out) CopyBlock(device_, op.src, host_, op.dst);
    for (const BlockCopy& op : plan.copies) CopyBlock(device_, op.src, device_, op.dst);
    for (const BlockSwap& op : plan.swap_in) CopyBlock(host_, op.src, device_, op.dst);
    // All writes before any read, as in a batched forward: two sequences writing one slot
    // would show up as a wrong context for one of them. A continued decode feeds the token the
    // previous plan sampled for it (the engine patches it in on the device).
    for (const ScheduledSequence& s : plan.seqs) {
      for (int32_t p = s.start_position; p < s.num_computed_tokens_after; ++p) {
        int32_t token = s.token_ids[p - s.start_position];
        if (s.continues) {
          EXPECT_EQ(token, kPendingToken);
          EXPECT_EQ(last_plan_sampled_.count(s.request_id), 1u)
              << "request " << s.request_id << " continues a plan that sampled nothing for it";
          token = last_plan_sampled_[s.request_id];
        }
        device_[Slot(s.block_table, p)] = token;
      }
    }
    StepResult result;
    result.step_id = plan.step_id;
    for (const ScheduledSequence& s : plan.seqs) {
      if (!s.samples) continue;
      std::vector<int32_t> context(s.num_computed_tokens_after);
      for (int32_t p = 0; p < s.num_computed_tokens_after; ++p) {
        context[p] = device_[Slot(s.block_table, p)];
      }
      const int32_t token = NextToken(context, vocab_);
      result.sampled.push_back(
          {.request_id = s.request_id, .token_id = token, .stop = eos_ && token == *eos_});
    }
    if (plan.HasWork()) {  // a plan of block moves only samples nothing and continues nothing
      last_plan_sampled_.clear();
      for (const SampledToken& t : result.sampled) last_plan_sampled_[t.request_id] = t.token_id;
    }
    return result;
  }

 private:
  size_t Slot(const std::vector<BlockId>& table, int32_t position) const {
    const size_t index = position / block_size_;
    EXPECT_LT(index, table.size());
    return static_cast<size_t>(table.at(index)) * block_size_ + position % block_size_;
  }
  void CopyBlock(const std::vector<int32_t>& from, BlockId src, std::vector<int32_t>& to,
                 BlockId dst) {
    std::copy_n(from.begin() + static_cast<size_t>(src) * block_size_, block_size_,
                to.begin() + static_cast<size_t>(dst) * block_size_);
  }

  int32_t block_size_;
  int32_t vocab_;
  std::optional<int32_t> eos_;
  std::vector<int32_t> device_;
  std::vector<int32_t> host_;
  std::map<RequestId, int32_t> last_plan_sampled_;  // the previous plan with work: its tokens
};

// The newest of `plans` with work (sequences to run), or null: the only plan a continued decode
// (overlap scheduling) may follow.
inline const StepPlan* LastWithWork(const std::deque<StepPlan>& plans) {
  for (auto it = plans.rbegin(); it != plans.rend(); ++it) {
    if (it->HasWork()) return &*it;
  }
  return nullptr;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> reason;
  std::string message;
};

// What the fake model generates for `prompt` when run alone with no KV tricks at all.
inline Outcome Reference(std::vector<int32_t> context, int32_t max_tokens, int32_t max_model_len,
                         int32_t vocab, std::optional<int32_t> eos) {
  Outcome out;
  while (true) {
    const int32_t token = NextToken(context, vocab);
    context.push_back(token);
    out.tokens.push_back(token);
    if (eos && token == *eos) {
      out.reason = FinishReason::kStop;
    } else if (static_cast<int32_t>(out.tokens.size()) >= max_tokens ||
               static_cast<int32_t>(context.size()) >= max_model_len) {
      out.reason = FinishReason::kLength;
    }
    if (out.reason) return out;
  }
}

// Engine loop stand-in: Step, execute, report; records every request's stream and ending.
// Like the engine, it keeps up to config.max_in_flight_steps plans outstanding: it plans again
// before executing the oldest while the scheduler allows (plans run in order).
class Driver {
 public:
  Driver(Scheduler& scheduler, int32_t vocab, std::optional<int32_t> eos = std::nullopt)
      : scheduler_(scheduler), model_(scheduler.config().blocks, vocab, eos) {}

  // One engine iteration; returns the plan for inspection (empty when none could be made).
  StepPlan Step() {
    StepPlan plan;
    bool planned_work = false;
    if (scheduler_.CanStep()) {
      plan = scheduler_.Step();
      for (const FinishedRequest& f : plan.finished) {
        Outcome& o = outcomes_[f.request_id];
        EXPECT_FALSE(o.reason.has_value()) << "request " << f.request_id << " finished twice";
        o.reason = f.reason;
        o.message = f.message;
      }
      for (const StepPlan& other : outstanding_) {
        for (const ScheduledSequence& s : plan.seqs) {
          // Only a continued decode (overlap scheduling) may follow its outstanding plan, and
          // only that plan's sampled decode or final chunk.
          const ScheduledSequence* before = FindSeq(other, s.request_id);
          EXPECT_TRUE(before == nullptr || (s.continues && before->samples &&
                                            &other == LastWithWork(outstanding_)))
              << "request " << s.request_id << " in two outstanding plans";
        }
      }
      planned_work = plan.HasWork();
      // A plan of block moves only (e.g. a request preempting itself) must run too.
      if (planned_work || plan.HasBlockOps()) outstanding_.push_back(plan);
    }
    if (!outstanding_.empty() && !(planned_work && scheduler_.CanStep())) FinishOldest();
    return plan;
  }

  // Steps until nothing is pending; fails the test if that takes more than `max_steps`.
  void RunToCompletion(int max_steps = 100000) {
    for (int i = 0; i < max_steps && (scheduler_.HasPendingWork() || !outstanding_.empty());
         ++i) {
      Step();
      ASSERT_TRUE(scheduler_.CheckInvariants().ok()) << scheduler_.CheckInvariants();
    }
    ASSERT_FALSE(scheduler_.HasPendingWork()) << "did not finish in " << max_steps << " steps";
  }

  // Executes the oldest outstanding plan and reports its result.
  void FinishOldest() {
    const StepPlan plan = std::move(outstanding_.front());
    outstanding_.pop_front();
    StepResult result = model_.Execute(plan);
    if (!plan.HasWork()) return;  // block moves only: no result expected
    for (const SampledToken& s : result.sampled) {
      // Requests aborted (and reported) while in flight keep the stream they had, and so do
      // requests a stop ended while their continued decode ran (as the engine does).
      Outcome& o = outcomes_[s.request_id];
      if (!o.reason && scheduler_.State(s.request_id)) o.tokens.push_back(s.token_id);
    }
    EXPECT_TRUE(scheduler_.OnStepResult(result).ok());
  }
  size_t num_outstanding() const { return outstanding_.size(); }
  // Requests of the plans not yet executed.
  std::vector<RequestId> OutstandingIds() const {
    std::vector<RequestId> ids;
    for (const StepPlan& plan : outstanding_) {
      for (const ScheduledSequence& s : plan.seqs) ids.push_back(s.request_id);
    }
    return ids;
  }

  const std::map<RequestId, Outcome>& outcomes() const { return outcomes_; }
  const Outcome& outcome(RequestId id) { return outcomes_[id]; }

 private:
  Scheduler& scheduler_;
  FakeModel model_;
  std::map<RequestId, Outcome> outcomes_;
  std::deque<StepPlan> outstanding_;  // planned, not yet executed; oldest first
};

}  // namespace xserv::engine::testing
