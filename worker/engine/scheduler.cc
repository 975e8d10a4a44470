#include "worker/engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::engine {

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config,
                                                             const Clock* clock) {
  RETURN_IF_ERROR(config.Validate());
  if (clock == nullptr) return absl::InvalidArgumentError("clock is required");
  return std::unique_ptr<Scheduler>(new Scheduler(config, clock));
}

Scheduler::Scheduler(const SchedulerConfig& config, const Clock* clock)
    : config_(config),
      clock_(clock),
      policy_(config.policy),
      blocks_(config.blocks),
      admission_reserve_blocks_(static_cast<int32_t>(
          std::ceil(config.admission_watermark * config.blocks.num_device_blocks))) {}

// ---- Requests in and out ----------------------------------------------------------------

absl::Status Scheduler::AddRequest(RequestSpec spec) {
  const int64_t prompt_len = static_cast<int64_t>(spec.prompt_token_ids.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("prompt is empty");
  if (spec.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  if (prompt_len >= config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", prompt_len,
                                                   " tokens; max_model_len ", config_.max_model_len,
                                                   " leaves no room to generate"));
  }
  if (requests_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", spec.id, " is already live"));
  }
  // An ended request's rows may still be in flight; their results are matched by id.
  for (const InFlightStep& step : in_flight_) {
    for (const InFlight& f : step.entries) {
      if (f.id == spec.id) {
        return absl::AlreadyExistsError(
            absl::StrCat("request ", spec.id, " still has a step in flight"));
      }
    }
  }
  auto r = std::make_unique<Request>();
  const uint64_t arrival_seq = next_arrival_seq_++;
  r->key = std::visit([&](const auto& p) { return p.Key(spec.priority, arrival_seq); }, policy_);
  r->arrival_time = clock_->Now();
  r->tokens = spec.prompt_token_ids;
  r->num_prompt_tokens = static_cast<int32_t>(prompt_len);
  r->spec = std::move(spec);
  waiting_.emplace(r->key, r.get());
  spdlog::debug("request {}: queued ({} prompt tokens, max_tokens {}, priority {})", r->spec.id,
                prompt_len, r->spec.max_tokens, r->spec.priority);
  requests_.emplace(r->spec.id, std::move(r));
  return absl::OkStatus();
}

absl::Status Scheduler::AbortRequest(RequestId id, std::string message) {
  Request* r = Find(id);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat("request ", id, " is not live"));
  Finish(r, FinishReason::kAbort, std::move(message));
  return absl::OkStatus();
}

void Scheduler::Finish(Request* r, FinishReason reason, std::string message) {
  const RequestId id = r->spec.id;
  blocks_.Free(id);
  Queue* queue = QueueOf(r->state);
  XSERV_CHECK(queue->erase(r->key) == 1);
  TransitionState(*r, RequestState::kFinished);
  spdlog::debug("request {}: finished ({}) {}", id, FinishReasonName(reason), message);
  pending_finished_.push_back({.request_id = id,
                               .reason = reason,
                               .message = std::move(message),
                               .num_prompt_tokens = r->num_prompt_tokens,
                               .num_output_tokens = r->num_output_tokens(),
                               .arrival_time = r->arrival_time});
  requests_.erase(id);
}

// ---- Step ------------------------------------------------------------------------------

StepPlan Scheduler::Step() {
  XSERV_CHECK(CanStep());
  StepPlan plan;
  plan.step_id = ++num_steps_;
  int32_t budget = config_.max_num_batched_tokens;
  // With several plans outstanding, each takes its share of the live requests, so that the
  // next plan finds the rest rather than nothing (a pipeline); overlap scheduling instead
  // continues the running plan's decodes in the next one.
  const size_t depth =
      config_.overlap_decodes ? 1 : static_cast<size_t>(config_.max_in_flight_steps);
  const size_t max_seqs = (requests_.size() + depth - 1) / depth;
  auto full = [&] { return budget == 0 || plan.seqs.size() >= max_seqs; };

  // 1. Running decodes: one token each, so that ongoing streams keep their pace. Once a
  // continuation finds no block, requests ranked below it are not continued either: they wait
  // for their results, and the pool's shortage is met by preempting from the back as usual.
  bool continuations_blocked = false;
  for (RequestId id : Snapshot(running_)) {
    if (full()) break;
    Request* r = Find(id);
    // Skip requests preempted or finished by an earlier iteration of this loop, and those
    // whose previous step has not come back, unless overlap scheduling continues them (that
    // step is a decode or a prompt's last chunk).
    if (r == nullptr) continue;
    if (r->in_flight()) {
      if (!continuations_blocked && Continues(*r)) {
        const int32_t n = ScheduleContinuation(r, plan);
        continuations_blocked = n == 0;
        budget -= n;
      }
      continue;
    }
    if (r->state == RequestState::kDecoding) budget -= ScheduleRunning(r, budget, plan);
  }
  // 2. Running prefills: the next chunk of each, in queue order.
  for (RequestId id : Snapshot(running_)) {
    if (full()) break;
    Request* r = Find(id);
    if (r == nullptr || r->in_flight() || r->state != RequestState::kPrefilling) continue;
    budget -= ScheduleRunning(r, budget, plan);
  }
  // A step that preempted is out of blocks: bringing work back now would only thrash, and
  // keeping swap-ins out of it means host blocks are never both written and read in one step.
  const bool preempted = !plan.preempted.empty();
  // 3. Swapped-out requests resume before anything new starts (they were admitted earlier).
  if (!preempted) {
    for (RequestId id : Snapshot(swapped_)) {
      if (full() || static_cast<int32_t>(running_.size()) >= config_.max_num_seqs) break;
      const int32_t n = ScheduleSwapIn(Find(id), budget, plan);
      if (n == 0) break;  // keep queue order: no overtaking
      budget -= n;
    }
  }
  // 4. Waiting requests (new, or preempted by recompute), head of line first.
  if (!preempted && swapped_.empty() && AdmitsThisStep(budget, plan)) {
    for (RequestId id : Snapshot(waiting_)) {
      if (full() || static_cast<int32_t>(running_.size()) >= config_.max_num_seqs) break;
      Request* r = Find(id);
      XSERV_CHECK(r != nullptr);
      const int32_t most_blocks =
          blocks_.MaxBlocksHeld(r->num_tokens(), config_.max_num_batched_tokens);
      if (most_blocks > blocks_.num_device_blocks()) {
        Finish(r, FinishReason::kError,
               absl::StrCat("sequence of ", r->num_tokens(), " tokens needs ", most_blocks,
                            " KV blocks; the pool has ", blocks_.num_device_blocks()));
        continue;
      }
      const int32_t n = ScheduleAdmission(r, budget, plan);
      if (n == 0) break;
      budget -= n;
      last_admission_step_ = num_steps_;
    }
  }
  plan.finished = std::move(pending_finished_);
  pending_finished_.clear();
  return plan;
}

bool Scheduler::AdmitsThisStep(int32_t budget, const StepPlan& plan) const {
  if (config_.max_waiting_steps == 0 || running_.empty() || waiting_.empty()) return true;
  if (num_steps_ - last_admission_step_ >= static_cast<uint64_t>(config_.max_waiting_steps)) {
    return true;
  }
  // A step that already feeds a prefill chunk replays no decode graph: holding back gains
  // nothing there.
  if (std::any_of(plan.seqs.begin(), plan.seqs.end(),
                  [](const ScheduledSequence& s) { return s.token_ids.size() > 1; })) {
    return true;
  }
  int64_t waiting_tokens = 0;  // what admitting now would feed, up to the step's budget
  for (const auto& [key, r] : waiting_) {
    waiting_tokens += r->num_tokens() - r->num_computed_tokens;
    if (waiting_tokens >= budget) return true;
  }
  return false;
}

int32_t Scheduler::ChunkLimit(int32_t num_remaining, int32_t budget) const {
  int32_t n = std::min(num_remaining, budget);
  if (!config_.enable_chunked_prefill) return n < num_remaining ? 0 : n;
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  return n;
}

int32_t Scheduler::ScheduleRunning(Request* r, int32_t budget, StepPlan& plan) {
  const RequestId id = r->spec.id;
  const int32_t want = ChunkLimit(r->num_tokens() - r->num_computed_tokens, budget);
  if (want == 0) return 0;
  while (true) {
    int32_t n = blocks_.MaxAppendableTokens(id, r->num_computed_tokens, want);
    // Without chunking a prefill is all or nothing; a decode wants 1 anyway.
    if (!config_.enable_chunked_prefill && n < want) n = 0;
    if (n > 0) {
      XSERV_CHECK(
          blocks_
              .AllocateSlots(id, r->num_computed_tokens, r->num_computed_tokens + n, &plan.copies)
              .ok());
      AddToPlan(r, n, /*resumed=*/false, plan);
      return n;
    }
    Request* victim = PickVictim();
    if (victim != r) {
      Preempt(victim, plan);
      continue;
    }
    if (running_.size() == 1) {
      // Alone it has the whole pool: waiting would never help.
      Finish(
          r, FinishReason::kError,
          absl::StrCat("sequence of ", r->num_tokens(), " tokens does not fit in the KV pool of ",
                       blocks_.num_device_blocks(), " blocks"));
    } else if (r->state == RequestState::kDecoding) {
      Preempt(r, plan);
    }
    // A prefill whose only possible victims were already scheduled this step keeps its KV and
    // waits: those requests progress and free blocks, and preempting a (possibly
    // higher-priority) prefill for them would throw its work away.
    return 0;
  }
}

bool Scheduler::Continues(const Request& r) const {
  // Its outstanding step feeds every token it has (a decode, or a prompt's last chunk), so it
  // samples the next. That token must not be the request's last by length: the row after it
  // would be past max_tokens or max_model_len. (A stop token can still end it; that row is
  // dropped.)
  return config_.overlap_decodes && r.num_in_flight_plans == 1 &&
         r.num_computed_tokens + r.num_in_flight_tokens == r.num_tokens() &&
         r.num_output_tokens() + 1 < r.spec.max_tokens &&
         r.num_tokens() + 1 < config_.max_model_len;
}

int32_t Scheduler::ScheduleContinuation(Request* r, StepPlan& plan) {
  const RequestId id = r->spec.id;
  const int32_t from = r->num_computed_tokens + r->num_in_flight_tokens;
  // Short of blocks it waits for its result and is planned (or preempted) as usual then:
  // requests in flight are never victims.
  if (blocks_.MaxAppendableTokens(id, from, 1) < 1) return 0;
  XSERV_CHECK(blocks_.AllocateSlots(id, from, from + 1, &plan.copies).ok());
  AddToPlan(r, 1, /*resumed=*/false, plan, /*continues=*/true);
  return 1;
}

int32_t Scheduler::ScheduleSwapIn(Request* r, int32_t budget, StepPlan& plan) {
  const RequestId id = r->spec.id;
  const int32_t want = ChunkLimit(r->num_tokens() - r->num_computed_tokens, budget);
  if (want == 0) return 0;
  const int32_t num_table = static_cast<int32_t>(blocks_.BlockTable(id).size());
  const int32_t extra = std::max(0, blocks_.BlocksFor(r->num_computed_tokens + want) - num_table) *
                        blocks_.NumTables();
  if (!blocks_.CanSwapIn(id, extra)) return 0;
  XSERV_CHECK(blocks_.SwapIn(id, &plan.swap_in).ok());
  swapped_.erase(r->key);
  running_.emplace(r->key, r);
  TransitionState(*r, r->RunningPhase());
  XSERV_CHECK(
      blocks_.AllocateSlots(id, r->num_computed_tokens, r->num_computed_tokens + want, &plan.copies)
          .ok());
  AddToPlan(r, want, /*resumed=*/true, plan);
  return want;
}

int32_t Scheduler::ScheduleAdmission(Request* r, int32_t budget, StepPlan& plan) {
  const RequestId id = r->spec.id;
  const bool use_cache = blocks_.prefix_caching_enabled() && r->spec.use_prefix_cache;
  PrefixMatch match;
  if (use_cache) match = blocks_.FindCachedPrefix(r->tokens);
  // Only uncached tokens cost budget.
  const int32_t want = ChunkLimit(r->num_tokens() - match.num_tokens, budget);
  if (want == 0) return 0;
  // Blocks this admission may take beyond its cache hits, keeping the watermark for the
  // decodes of already-running requests.
  const int32_t reserve = running_.empty() ? 0 : admission_reserve_blocks_;
  const int32_t spare = blocks_.NumFreeDeviceBlocks() - match.num_evictable - reserve;
  if (spare < 0) return 0;
  // Each new block of positions costs a block in every table (no prefix hits with a window).
  const int32_t num_matched_blocks = static_cast<int32_t>(match.blocks.size());
  int32_t n =
      std::min(want, (num_matched_blocks + spare / blocks_.NumTables()) * blocks_.block_size() -
                         match.num_tokens);
  if (n <= 0 || (!config_.enable_chunked_prefill && n < want)) return 0;

  XSERV_CHECK(blocks_.AllocateSequence(id, r->tokens, match, match.num_tokens + n, use_cache).ok());
  const bool resumed = r->state == RequestState::kPreemptedRecompute;
  if (!resumed && r->num_steps_scheduled == 0) num_prompt_tokens_total_ += r->num_prompt_tokens;
  r->num_computed_tokens = match.num_tokens;
  r->num_cached_tokens = match.num_tokens;
  waiting_.erase(r->key);
  running_.emplace(r->key, r);
  TransitionState(*r, r->RunningPhase());
  AddToPlan(r, n, resumed, plan);
  return n;
}

Request* Scheduler::PickVictim() const {
  // Requests of this plan are in flight too: AddToPlan marks them.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!it->second->in_flight()) return it->second;
  }
  XSERV_CHECK(false && "no preemption candidate: the requester itself is always one");
  return nullptr;
}

void Scheduler::Preempt(Request* r, StepPlan& plan) {
  const RequestId id = r->spec.id;
  XSERV_CHECK(running_.erase(r->key) == 1);
  ++r->num_preemptions;
  ++num_preemptions_total_;
  plan.preempted.push_back(id);
  if (config_.preemption_mode == PreemptionMode::kSwap && blocks_.CanSwapOut(id)) {
    XSERV_CHECK(blocks_.SwapOut(id, &plan.swap_out).ok());
    TransitionState(*r, RequestState::kPreemptedSwapped);
    swapped_.emplace(r->key, r);
    return;
  }
  // Recompute: its committed full blocks stay in the prefix cache, so re-admission often
  // finds most of them again.
  blocks_.Free(id);
  r->num_computed_tokens = 0;
  r->num_cached_tokens = 0;
  TransitionState(*r, RequestState::kPreemptedRecompute);
  waiting_.emplace(r->key, r);
}

void Scheduler::AddToPlan(Request* r, int32_t num_new_tokens, bool resumed, StepPlan& plan,
                          bool continues) {
  // Past the tokens of its outstanding plan, if it continues one.
  const int32_t start = r->num_computed_tokens + r->num_in_flight_tokens;
  const int32_t end = start + num_new_tokens;
  ScheduledSequence& s = plan.seqs.emplace_back();
  s.request_id = r->spec.id;
  if (continues) {  // feeds the token its outstanding plan samples
    XSERV_CHECK(num_new_tokens == 1 && end == r->num_tokens() + 1);
    s.token_ids = {kPendingToken};
  } else {
    XSERV_CHECK(num_new_tokens > 0 && end <= r->num_tokens());
    s.token_ids.assign(r->tokens.begin() + start, r->tokens.begin() + end);
  }
  s.continues = continues;
  s.start_position = start;
  s.num_computed_tokens_after = end;
  auto table = blocks_.BlockTable(r->spec.id);
  s.block_table.assign(table.begin(), table.end());
  auto window = blocks_.WindowTable(r->spec.id);
  s.block_table.insert(s.block_table.end(), window.begin(), window.end());
  s.samples = continues || end == r->num_tokens();
  s.is_new = r->num_steps_scheduled == 0;
  s.resumed = resumed;
  s.num_cached_tokens = (s.is_new || resumed) ? r->num_cached_tokens : 0;
  ++r->num_steps_scheduled;
  ++r->num_in_flight_plans;
  r->num_in_flight_tokens += num_new_tokens;
  plan.num_batched_tokens += num_new_tokens;
  if (in_flight_.empty() || in_flight_.back().step_id != plan.step_id) {
    if (!in_flight_.empty()) ++num_overlapped_steps_total_;
    in_flight_.push_back({.step_id = plan.step_id});
  }
  in_flight_.back().entries.push_back(
      {.id = r->spec.id, .num_new_tokens = num_new_tokens, .samples = s.samples});
}

// ---- Results ---------------------------------------------------------------------------

absl::Status Scheduler::OnStepResult(const StepResult& result) {
  if (in_flight_.empty()) {
    if (result.sampled.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError("no step in flight");
  }
  const InFlightStep& step = in_flight_.front();
  if (result.step_id != step.step_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("result for step ", result.step_id, ", expected ", step.step_id));
  }
  // Validate before mutating: one token per live sampling entry, none for anything else.
  // Requests aborted or stopped since Step() are gone; tokens for them are dropped. (A live
  // request of an outstanding plan is that plan's: AddRequest refuses an id while it is in
  // flight, and requests in flight are never preempted.)
  absl::flat_hash_set<RequestId> expected;
  for (const InFlight& f : step.entries) {
    const Request* r = Find(f.id);
    if (f.samples && r != nullptr && r->in_flight()) expected.insert(f.id);
  }
  absl::flat_hash_set<RequestId> seen;
  for (const SampledToken& s : result.sampled) {
    if (Find(s.request_id) == nullptr) continue;
    if (!expected.contains(s.request_id) || !seen.insert(s.request_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected sampled token for request ", s.request_id));
    }
  }
  if (seen.size() != expected.size()) {
    return absl::InvalidArgumentError("a sampling request got no token");
  }

  for (const InFlight& f : step.entries) {
    Request* r = Find(f.id);
    if (r == nullptr || !r->in_flight()) continue;
    r->num_computed_tokens += f.num_new_tokens;
    r->num_in_flight_tokens -= f.num_new_tokens;
    --r->num_in_flight_plans;
    blocks_.CommitComputed(f.id, r->tokens, r->num_computed_tokens);
    // Later steps (in flight or planned) query from num_computed_tokens on.
    blocks_.ReleaseOutsideWindow(f.id, r->num_computed_tokens);
  }
  in_flight_.pop_front();

  for (const SampledToken& s : result.sampled) {
    Request* r = Find(s.request_id);
    if (r == nullptr) continue;
    r->tokens.push_back(s.token_id);
    ++num_generation_tokens_total_;
    if (s.stop) {
      Finish(r, FinishReason::kStop, "");
    } else if (r->num_output_tokens() >= r->spec.max_tokens) {
      Finish(r, FinishReason::kLength, "max_tokens");
    } else if (r->num_tokens() >= config_.max_model_len) {
      Finish(r, FinishReason::kLength, "max_model_len");
    } else if (r->state == RequestState::kPrefilling) {
      TransitionState(*r, RequestState::kDecoding);
    }
  }
  return absl::OkStatus();
}

// ---- Queries ---------------------------------------------------------------------------

Request* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

Scheduler::Queue* Scheduler::QueueOf(RequestState state) {
  switch (state) {
    case RequestState::kWaiting:
    case RequestState::kPreemptedRecompute:
      return &waiting_;
    case RequestState::kPrefilling:
    case RequestState::kDecoding:
      return &running_;
    case RequestState::kPreemptedSwapped:
      return &swapped_;
    case RequestState::kFinished:
      break;
  }
  XSERV_CHECK(false && "finished requests are in no queue");
  return nullptr;
}

std::vector<RequestId> Scheduler::Snapshot(const Queue& queue) const {
  std::vector<RequestId> ids;
  ids.reserve(queue.size());
  for (const auto& [key, r] : queue) ids.push_back(r->spec.id);
  return ids;
}

const std::any* Scheduler::Payload(RequestId id) const {
  const Request* r = Find(id);
  return r == nullptr ? nullptr : &r->spec.payload;
}

std::optional<RequestState> Scheduler::State(RequestId id) const {
  const Request* r = Find(id);
  if (r == nullptr) return std::nullopt;
  return r->state;
}

std::span<const int32_t> Scheduler::OutputTokens(RequestId id) const {
  const Request* r = Find(id);
  if (r == nullptr) return {};
  return r->output_tokens();
}

SchedulerStats Scheduler::Stats() const {
  return {.num_running = static_cast<int32_t>(running_.size()),
          .num_waiting = static_cast<int32_t>(waiting_.size()),
          .num_swapped = static_cast<int32_t>(swapped_.size()),
          .num_steps = num_steps_,
          .num_prompt_tokens_total = num_prompt_tokens_total_,
          .num_generation_tokens_total = num_generation_tokens_total_,
          .num_preemptions_total = num_preemptions_total_,
          .num_overlapped_steps_total = num_overlapped_steps_total_,
          .blocks = blocks_.Stats()};
}

absl::Status Scheduler::CheckInvariants() const {
  if (waiting_.size() + running_.size() + swapped_.size() != requests_.size()) {
    return absl::InternalError("queues and request map disagree");
  }
  if (static_cast<int32_t>(running_.size()) > config_.max_num_seqs) {
    return absl::InternalError("more running requests than max_num_seqs");
  }
  if (blocks_.NumSequences() != static_cast<int32_t>(running_.size() + swapped_.size())) {
    return absl::InternalError("block tables exist for requests that hold no blocks");
  }
  auto check_queue = [&](const Queue& queue, auto&& ok_state) -> absl::Status {
    for (const auto& [key, r] : queue) {
      const RequestId id = r->spec.id;
      if (Find(id) != r || r->key != key || !ok_state(r->state)) {
        return absl::InternalError(absl::StrCat("request ", id, " in the wrong queue (",
                                                std::string(RequestStateName(r->state)), ")"));
      }
    }
    return absl::OkStatus();
  };
  using S = RequestState;
  RETURN_IF_ERROR(
      check_queue(waiting_, [](S s) { return s == S::kWaiting || s == S::kPreemptedRecompute; }));
  RETURN_IF_ERROR(
      check_queue(running_, [](S s) { return s == S::kPrefilling || s == S::kDecoding; }));
  RETURN_IF_ERROR(check_queue(swapped_, [](S s) { return s == S::kPreemptedSwapped; }));
  for (const auto& [key, r] : waiting_) {
    if (blocks_.HasSequence(r->spec.id) || r->num_computed_tokens != 0) {
      return absl::InternalError(absl::StrCat("waiting request ", r->spec.id, " holds KV"));
    }
  }
  for (const auto& [key, r] : swapped_) {
    if (!blocks_.IsSwappedOut(r->spec.id)) {
      return absl::InternalError(absl::StrCat("swapped request ", r->spec.id, " not on host"));
    }
  }
  for (const auto& [key, r] : running_) {
    const RequestId id = r->spec.id;
    if (!blocks_.HasSequence(id) || blocks_.IsSwappedOut(id)) {
      return absl::InternalError(absl::StrCat("running request ", id, " has no device table"));
    }
    const int32_t covered =
        static_cast<int32_t>(blocks_.BlockTable(id).size()) * blocks_.block_size();
    if (covered < r->num_computed_tokens + r->num_in_flight_tokens ||
        r->num_computed_tokens >= r->num_tokens() || r->num_in_flight_plans < 0 ||
        r->num_in_flight_plans > config_.max_in_flight_steps ||
        (r->num_in_flight_plans == 0) != (r->num_in_flight_tokens == 0)) {
      return absl::InternalError(absl::StrCat("running request ", id, " has bad counts"));
    }
    if (!r->in_flight() && r->state == S::kDecoding &&
        r->num_computed_tokens + 1 != r->num_tokens()) {
      return absl::InternalError(absl::StrCat("decoding request ", id, " is behind"));
    }
  }
  return blocks_.CheckInvariants();
}

}  // namespace xserv::engine
