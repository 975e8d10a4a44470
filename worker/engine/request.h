// Request: the scheduler's record of one generation request, and its lifecycle.
//
// Owned by the Scheduler (scheduler.h) and touched only on the engine-loop thread. The
// lifecycle is one ordered enum; every change goes through TransitionState(), which checks the
// edge and logs it with the request id.
//
//   kWaiting ─┬─> kPrefilling ──> kDecoding ──> kFinished
//             └─> kDecoding        │   │
//   kPrefilling/kDecoding ──> kPreemptedSwapped ──> kPrefilling | kDecoding   (swap-in)
//   kPrefilling/kDecoding ──> kPreemptedRecompute ──> kPrefilling | kDecoding (re-admitted)
//   any non-finished state ──> kFinished (stop, length, abort, error)
#pragma once

#include <any>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/clock.h"

namespace xserv::engine {

using RequestId = uint64_t;

enum class RequestState : uint8_t {
  kWaiting,             // queued, never scheduled, holds no blocks
  kPrefilling,          // holds device blocks; prompt (or recompute prompt) partly computed
  kDecoding,            // holds device blocks; one token per step
  kPreemptedSwapped,    // blocks on the host; resumes by swap-in
  kPreemptedRecompute,  // blocks dropped; queued to prefill prompt + generated tokens again
  kFinished,            // terminal; blocks freed
};

// Mirrors xserv.worker.v1.FinishReason.
enum class FinishReason : uint8_t {
  kStop,    // the engine's stop logic ended it (EOS / stop token id)
  kLength,  // max_tokens or the model's context limit
  kAbort,   // AbortRequest (client cancel, Abort RPC, shutdown)
  kError,   // the scheduler cannot serve it (e.g. larger than the whole KV pool)
};

std::string_view RequestStateName(RequestState state);
std::string_view FinishReasonName(FinishReason reason);

// What the engine hands to Scheduler::AddRequest.
struct RequestSpec {
  RequestId id = 0;
  std::vector<int32_t> prompt_token_ids;  // non-empty
  int32_t max_tokens = 1;                 // >= 1; generation also stops at max_model_len
  int32_t priority = 0;                   // lower runs first under the priority policy
  // False skips the prefix-cache lookup (e.g. prompt logprobs need every prompt position).
  bool use_prefix_cache = true;
  // Anything the engine wants back later (sampling parameters, stream handle). The scheduler
  // never looks inside; see Scheduler::Payload().
  std::any payload;
};

// Position in a queue: smaller runs first. Computed once by the scheduling policy.
struct QueueKey {
  int64_t rank = 0;          // policy rank (0 for FCFS, the priority otherwise)
  uint64_t arrival_seq = 0;  // admission order to the scheduler, unique
  auto operator<=>(const QueueKey&) const = default;
};

struct Request {
  RequestSpec spec;
  QueueKey key;
  Time arrival_time{};
  RequestState state = RequestState::kWaiting;

  // Prompt followed by generated tokens. KV exists for the first num_computed_tokens.
  std::vector<int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;
  int32_t num_cached_tokens = 0;    // prefix-cache hit at the latest admission
  uint64_t num_steps_scheduled = 0;  // 0 until the engine has seen the request once
  // The plans it is in whose results have not come back (at most 1, or 2 with overlap
  // scheduling: SchedulerConfig::overlap_decodes), and the tokens they feed.
  int32_t num_in_flight_plans = 0;
  int32_t num_in_flight_tokens = 0;
  int32_t num_preemptions = 0;

  bool in_flight() const { return num_in_flight_plans > 0; }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> output_tokens() const {
    return std::span<const int32_t>(tokens).subspan(num_prompt_tokens);
  }
  // The running phase a request enters when it (re)gains device blocks: decoding once the
  // only token without KV is the last generated one, else (re)prefilling.
  RequestState RunningPhase() const {
    return num_output_tokens() > 0 && num_computed_tokens + 1 == num_tokens()
               ? RequestState::kDecoding
               : RequestState::kPrefilling;
  }
};

// The single place a request changes state; aborts (XSERV_CHECK) on an illegal edge.
void TransitionState(Request& request, RequestState to);

}  // namespace xserv::engine
