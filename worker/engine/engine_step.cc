// The engine's steps: planning and preparing a step, running it, sampling its logits and
// applying the result, in the default order (RunStep) and in overlap scheduling's
// (RunOverlappedStep).
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/engine/engine.h"
#include "worker/engine/live_request.h"
#include "worker/sampling/sampler.h"

namespace xserv::engine {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::vector<std::pair<int32_t, int32_t>> Pairs(const std::vector<BlockSwap>& moves) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const BlockSwap& m : moves) out.emplace_back(m.src, m.dst);
  return out;
}

}  // namespace

absl::StatusOr<bool> Engine::RunStep() {
  if (config_.scheduler.overlap_decodes) return RunOverlappedStep();
  bool progressed = false;
  bool planned_work = false;
  if (scheduler_->CanStep()) {
    if (std::optional<PendingStep> pending = PlanStep(progressed)) {
      RETURN_IF_ERROR(Publish(pending->step));
      planned_work = pending->plan.HasWork();
      pending_.push_back(std::move(*pending));
    }
  }
  // Keep the pipeline full: while another step may be outstanding, plan it before running the
  // oldest (the earlier stages start on it meanwhile).
  if (planned_work && scheduler_->CanStep()) return true;
  if (pending_.empty()) return progressed;
  PendingStep oldest = std::move(pending_.front());
  pending_.pop_front();
  RETURN_IF_ERROR(FinishStep(oldest));
  return true;
}

Engine::PendingStep Engine::PrepareStep(StepPlan plan) {
  PendingStep pending;
  DeviceStep& step = pending.step;
  step.swap_out = Pairs(plan.swap_out);
  for (const BlockCopy& c : plan.copies) step.copies.emplace_back(c.src, c.dst);
  step.swap_in = Pairs(plan.swap_in);
  const Time now = clock_->Now();
  pending.first_row.resize(plan.seqs.size());
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    ScheduledSequence& s = plan.seqs[i];
    Live& l = *live_.at(s.request_id);
    if (!l.first_scheduled) {
      l.first_scheduled = now;
      l.cached_tokens = s.num_cached_tokens;
    }
    model::LogitsRows mode = s.samples ? model::LogitsRows::kLast : model::LogitsRows::kNone;
    if (l.WantsPromptLogprobs()) mode = model::LogitsRows::kAll;
    pending.first_row[i] = pending.rows;
    pending.rows += mode == model::LogitsRows::kAll
                        ? static_cast<int64_t>(s.token_ids.size())
                        : (mode == model::LogitsRows::kLast ? 1 : 0);
    step.chunks.push_back(DeviceChunk{.tokens = s.token_ids,
                                      .start_position = s.start_position,
                                      .block_table = s.block_table,
                                      .logits = mode});
  }
  pending.plan = std::move(plan);
  return pending;
}

absl::Status Engine::FinishStep(const PendingStep& pending) {
  kernels::Tensor logits;
  {
    ScopedPhase timed(phases_, StepPhase::kForward);
    ASSIGN_OR_RETURN(logits, runner_.Run(pending.step));
  }
  {
    // The previous step's tokens go out while the device runs this one.
    ScopedPhase timed(phases_, StepPhase::kStream);
    FlushOutbox();
  }
  if (!pending.plan.HasWork()) return absl::OkStatus();
  std::vector<int64_t> draw_row;
  ASSIGN_OR_RETURN(std::vector<kernels::SampleRowResult> sampled,
                   SampleStep(pending, logits, draw_row));
  return ApplyResults(pending, sampled, draw_row);
}

std::optional<Engine::PendingStep> Engine::PlanStep(bool& delivered) {
  StepPlan plan;
  {
    ScopedPhase timed(phases_, StepPhase::kSchedule);
    plan = scheduler_->Step();
    for (const FinishedRequest& f : plan.finished) DeliverFinished(f);
  }
  delivered = !plan.finished.empty();
  if (!plan.HasWork() && !plan.HasBlockOps()) return std::nullopt;
  ScopedPhase timed(phases_, StepPhase::kPrepare);
  return PrepareStep(std::move(plan));
}

absl::Status Engine::LaunchOverlapped(PendingStep pending) {
  kernels::Tensor logits;
  {
    ScopedPhase timed(phases_, StepPhase::kForward);
    ASSIGN_OR_RETURN(logits, runner_.Run(pending.step));
  }
  // A plan of block moves only has nothing to sample.
  if (pending.plan.HasWork()) launched_ = Launched{std::move(pending), logits};
  return absl::OkStatus();
}

absl::StatusOr<bool> Engine::RunOverlappedStep() {
  if (!launched_) {  // nothing on the device: plan and launch a step
    if (!scheduler_->CanStep()) return false;
    bool delivered = false;
    std::optional<PendingStep> pending = PlanStep(delivered);
    if (!pending) return delivered;
    RETURN_IF_ERROR(LaunchOverlapped(std::move(*pending)));
    // What the last results decided goes out while the device runs this step.
    ScopedPhase timed(phases_, StepPhase::kStream);
    FlushOutbox();
    return true;
  }
  // A step runs on the device: plan and prepare the next one meanwhile (its decodes continue
  // those of the running step), and stream what is decided.
  bool delivered = false;
  std::optional<PendingStep> next;
  if (scheduler_->CanStep()) next = PlanStep(delivered);
  {
    ScopedPhase timed(phases_, StepPhase::kStream);
    FlushOutbox();
  }
  Launched ran = std::move(*launched_);
  launched_.reset();
  std::vector<int64_t> draw_row;
  ASSIGN_OR_RETURN(std::vector<kernels::SampleRowResult> sampled,
                   SampleStep(ran.pending, ran.logits, draw_row));
  if (next) {
    // The continued rows feed the tokens just drawn. Every continued request drew one: nothing
    // ends a request between the plan and the sampling (aborts are taken before planning). 0 is
    // only a guard; such a row's result would be dropped.
    std::unordered_map<RequestId, int32_t> drawn;
    for (size_t i = 0; i < ran.pending.plan.seqs.size(); ++i) {
      if (draw_row[i] < 0) continue;
      drawn[ran.pending.plan.seqs[i].request_id] = sampled[draw_row[i]].token;
    }
    for (size_t i = 0; i < next->plan.seqs.size(); ++i) {
      const ScheduledSequence& s = next->plan.seqs[i];
      if (!s.continues) continue;
      const auto it = drawn.find(s.request_id);
      next->step.chunks[i].tokens[0] = it == drawn.end() ? 0 : it->second;
    }
    RETURN_IF_ERROR(LaunchOverlapped(std::move(*next)));
  }
  // The scheduler learns step N's tokens after N + 1 was planned and launched.
  RETURN_IF_ERROR(ApplyResults(ran.pending, sampled, draw_row));
  return true;
}

Engine::Live* Engine::LiveOf(RequestId id) {
  auto it = live_.find(id);
  if (it == live_.end() || !scheduler_->State(id).has_value()) return nullptr;
  return it->second.get();
}

absl::StatusOr<std::vector<kernels::SampleRowResult>> Engine::SampleStep(
    const PendingStep& pending, const kernels::Tensor& logits, std::vector<int64_t>& draw_row) {
  const StepPlan& plan = pending.plan;
  const DeviceStep& step = pending.step;
  const std::vector<int64_t>& first_row = pending.first_row;
  int64_t tokens = 0;
  for (const DeviceChunk& c : step.chunks) tokens += static_cast<int64_t>(c.tokens.size());
  phases_.CountStep(static_cast<int64_t>(step.chunks.size()), tokens);
  ScopedPhase timed(phases_, StepPhase::kSample);
  // One spec per logits row: prompt positions still to report are scored, each sampling
  // sequence's last row draws; only the small per-row results cross to the host.
  std::vector<kernels::SampleRowSpec> specs(static_cast<size_t>(pending.rows));
  std::vector<std::vector<kernels::TokenAdjustment>> adjustments(plan.seqs.size());
  draw_row.assign(plan.seqs.size(), -1);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSequence& s = plan.seqs[i];
    const Live* l = LiveOf(s.request_id);
    if (l == nullptr) continue;
    const bool all_rows = step.chunks[i].logits == model::LogitsRows::kAll;
    if (all_rows) {  // prompt logprobs of the positions this chunk covers, in order
      size_t expected = l->prompt_logprobs.size() + 1;
      for (size_t j = 0; j < s.token_ids.size(); ++j) {
        const size_t next = static_cast<size_t>(s.start_position) + j + 1;
        if (next >= l->params.prompt.size() || next != expected) continue;
        specs[first_row[i] + j] =
            sampling::ScoreSpec(l->params.prompt[next], l->params.sampling.prompt_logprobs);
        ++expected;
      }
    }
    if (!s.samples) continue;
    draw_row[i] = all_rows ? first_row[i] + static_cast<int64_t>(s.token_ids.size()) - 1
                           : first_row[i];
    const std::span<const int32_t> outputs = scheduler_->OutputTokens(s.request_id);
    sampling::SamplingContext ctx;
    ctx.prompt_tokens = l->params.prompt;
    ctx.output_tokens = outputs;
    ctx.seed = l->seed;
    if (static_cast<int32_t>(outputs.size()) < l->params.min_tokens) {
      ctx.banned_tokens = l->banned;
    }
    specs[draw_row[i]] = sampling::DrawSpec(l->params.sampling, ctx, adjustments[i]);
  }
  std::vector<kernels::SampleRowResult> sampled(specs.size());
  if (pending.rows > 0) RETURN_IF_ERROR(backend_.Sample(logits, specs, sampled));
  return sampled;
}

absl::Status Engine::ApplyResults(const PendingStep& pending,
                                  const std::vector<kernels::SampleRowResult>& sampled,
                                  const std::vector<int64_t>& draw_row) {
  const StepPlan& plan = pending.plan;
  const DeviceStep& step = pending.step;
  const std::vector<int64_t>& first_row = pending.first_row;
  ScopedPhase timed(phases_, StepPhase::kResults);
  StepResult result{.step_id = plan.step_id};
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSequence& s = plan.seqs[i];
    Live* lp = LiveOf(s.request_id);
    if (lp == nullptr) continue;
    Live& l = *lp;
    if (step.chunks[i].logits == model::LogitsRows::kAll) {
      for (size_t j = 0; j < s.token_ids.size(); ++j) {
        const size_t next = static_cast<size_t>(s.start_position) + j + 1;
        if (next >= l.params.prompt.size() || next != l.prompt_logprobs.size() + 1) continue;
        l.prompt_logprobs.push_back(sampling::ToPositionLogprobs(sampled[first_row[i] + j]));
      }
    }
    if (!s.samples) continue;
    const kernels::SampleRowResult& drawn = sampled[draw_row[i]];
    const int32_t token = drawn.token;
    const bool stop = Contains(l.params.stop_token_ids, token) ||
                      (!l.params.ignore_eos && Contains(config_.eos_token_ids, token));
    if (stop) l.stop_token = token;
    result.sampled.push_back({.request_id = s.request_id, .token_id = token, .stop = stop});
    if (!l.first_token) l.first_token = clock_->Now();
    TokenOutput out{.token = token};
    if (l.params.sampling.logprobs >= 0) out.logprobs = sampling::ToPositionLogprobs(drawn);
    std::vector<sampling::PositionLogprobs> prompt_logprobs;
    if (l.params.sampling.prompt_logprobs >= 0 && !l.prompt_logprobs_sent) {
      prompt_logprobs = std::move(l.prompt_logprobs);
      l.prompt_logprobs.clear();
      l.prompt_logprobs_sent = true;
    }
    outbox_.push_back({.sink = l.params.sink,
                       .tokens = {std::move(out)},
                       .prompt_logprobs = std::move(prompt_logprobs)});
  }
  return scheduler_->OnStepResult(result);
}

}  // namespace xserv::engine
