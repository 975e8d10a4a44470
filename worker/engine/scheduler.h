// Scheduler: iteration-level (continuous-batching) scheduler of one replica — waiting, running
// and swapped queues, a per-step token budget with chunked prefill mixed with decodes, FCFS or
// priority order, preemption by swap or recompute, and the KV BlockManager with prefix caching.
//
// Owned by the engine loop and called only from the engine-loop thread (not synchronised; gRPC
// threads post to the engine's inbox instead). Pure logic: no model, no CUDA, no gRPC; time
// comes from the injected Clock.
//
// Engine loop contract:
//   AddRequest / AbortRequest      any time between steps;
//   plan = Step();                 report plan.finished, execute the plan (see step_plan.h);
//   OnStepResult(result)           exactly once for each plan with HasWork(), in plan order;
//                                  one SampledToken per entry with samples == true.
// Step() may be called again before the last plan's result while fewer than
// config.max_in_flight_steps plans with work are outstanding (CanStep()): requests of an
// outstanding plan are left out of new plans (their KV counts are not final yet) and are never
// preemption victims, and each plan takes at most 1 / max_in_flight_steps of the live requests,
// so consecutive plans split the batch between them. With config.overlap_decodes instead (two
// plans), requests whose outstanding step samples (decodes, prompts' last chunks) go on in the
// next plan with a placeholder token (ScheduledSequence::continues), unless the outstanding
// token is their last by length.
// Plans must be executed in order: an aborted (or stopped) request's blocks may be reused by
// the next plan while its last one is still running.
// Who ends a request: the engine decides kStop (EOS / stop ids / min_tokens / ignore_eos — it
// owns the sampling parameters) via SampledToken::stop; the scheduler decides kLength
// (max_tokens, max_model_len), kAbort (AbortRequest) and kError (cannot fit in the KV pool).
// Every termination is reported once, in the `finished` list of the next plan.
#pragma once

#include <any>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/block_manager.h"
#include "worker/engine/clock.h"
#include "worker/engine/request.h"
#include "worker/engine/scheduler_config.h"
#include "worker/engine/step_plan.h"

namespace xserv::engine {

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;    // includes requests preempted by recompute
  int32_t num_swapped = 0;    // preempted by swap
  uint64_t num_steps = 0;
  uint64_t num_prompt_tokens_total = 0;      // prompt tokens of requests admitted once
  uint64_t num_generation_tokens_total = 0;  // sampled tokens accepted
  uint64_t num_preemptions_total = 0;
  // Plans with work handed out while an earlier one was still outstanding (pipelined steps).
  uint64_t num_overlapped_steps_total = 0;
  BlockManagerStats blocks;
};

class Scheduler {
 public:
  // `clock` must outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config,
                                                           const Clock* clock);

  // Queues a request. InvalidArgument for an empty prompt, max_tokens < 1 or a prompt that
  // leaves no room to generate within max_model_len; AlreadyExists for a live id, or one whose
  // ended request still has a step in flight.
  absl::Status AddRequest(RequestSpec spec);
  // Ends the request in whatever state and frees its blocks now; reported as kAbort in the next
  // plan. NotFound if the id is unknown or already finished.
  absl::Status AbortRequest(RequestId id, std::string message = "aborted");

  StepPlan Step();
  absl::Status OnStepResult(const StepResult& result);
  // Whether Step() may be called now: fewer than max_in_flight_steps plans await their results.
  bool CanStep() const {
    return static_cast<int32_t>(in_flight_.size()) < config_.max_in_flight_steps;
  }
  int32_t num_steps_in_flight() const { return static_cast<int32_t>(in_flight_.size()); }

  // True while any request is queued, running or swapped, or a termination awaits reporting.
  bool HasPendingWork() const { return !requests_.empty() || !pending_finished_.empty(); }
  // Engine data attached at AddRequest; nullptr once the request has finished.
  const std::any* Payload(RequestId id) const;
  std::optional<RequestState> State(RequestId id) const;
  // Tokens generated so far (empty once finished).
  std::span<const int32_t> OutputTokens(RequestId id) const;

  SchedulerStats Stats() const;
  const SchedulerConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return blocks_; }
  // Queues match states, block tables match requests, and BlockManager::CheckInvariants().
  absl::Status CheckInvariants() const;

 private:
  using Queue = std::map<QueueKey, Request*>;
  struct InFlight {
    RequestId id;
    int32_t num_new_tokens;
    bool samples;
  };
  struct InFlightStep {
    uint64_t step_id = 0;
    std::vector<InFlight> entries;
  };

  Scheduler(const SchedulerConfig& config, const Clock* clock);

  Request* Find(RequestId id) const;
  Queue* QueueOf(RequestState state);
  std::vector<RequestId> Snapshot(const Queue& queue) const;
  int32_t ChunkLimit(int32_t num_remaining, int32_t budget) const;

  // Schedules up to `budget` tokens of running request `r`, preempting victims (maybe `r`)
  // when the pool is short. Returns the tokens scheduled (0 if none).
  int32_t ScheduleRunning(Request* r, int32_t budget, StepPlan& plan);
  int32_t ScheduleSwapIn(Request* r, int32_t budget, StepPlan& plan);
  int32_t ScheduleAdmission(Request* r, int32_t budget, StepPlan& plan);
  // Whether this step (planned so far: `plan`) may admit waiting requests
  // (SchedulerConfig::max_waiting_steps).
  bool AdmitsThisStep(int32_t budget, const StepPlan& plan) const;
  // The worst running request in no outstanding plan (this one included).
  Request* PickVictim() const;
  void Preempt(Request* r, StepPlan& plan);
  // Whether request `r`, in flight, goes on in the plan being made (overlap_decodes).
  bool Continues(const Request& r) const;
  // Plans `r`'s next decode after its outstanding one, with a placeholder token. Returns 1, or
  // 0 when the pool is short.
  int32_t ScheduleContinuation(Request* r, StepPlan& plan);
  // continues: the decode after r's outstanding plan (token_ids {kPendingToken}).
  void AddToPlan(Request* r, int32_t num_new_tokens, bool resumed, StepPlan& plan,
                 bool continues = false);
  // Removes `r` from its queue, frees its blocks and destroys it; `r` dangles afterwards.
  void Finish(Request* r, FinishReason reason, std::string message);

  SchedulerConfig config_;
  const Clock* clock_;
  SchedulingPolicy policy_;
  BlockManager blocks_;
  int32_t admission_reserve_blocks_;

  absl::flat_hash_map<RequestId, std::unique_ptr<Request>> requests_;
  Queue waiting_;  // kWaiting and kPreemptedRecompute
  Queue running_;  // kPrefilling and kDecoding
  Queue swapped_;  // kPreemptedSwapped
  std::vector<FinishedRequest> pending_finished_;

  std::deque<InFlightStep> in_flight_;  // plans with work awaiting OnStepResult, oldest first

  uint64_t next_arrival_seq_ = 1;
  uint64_t num_steps_ = 0;
  uint64_t last_admission_step_ = 0;  // the last step that admitted a waiting request
  uint64_t num_prompt_tokens_total_ = 0;
  uint64_t num_generation_tokens_total_ = 0;
  uint64_t num_preemptions_total_ = 0;
  uint64_t num_overlapped_steps_total_ = 0;
};

}  // namespace xserv::engine
