// StepPlan: everything one engine step must do, as plain data (cf. vLLM's SchedulerOutput).
//
// Produced by Scheduler::Step() on the engine-loop thread and handed to the model runner (and,
// serialised, to peer ranks); the scheduler keeps no reference into it. StepResult is what the
// engine returns through Scheduler::OnStepResult() after the forward pass and sampling.
//
// Execution order for one plan:
//   1. swap_out   (device -> host) — their device blocks may be reused by this very step;
//   2. copies     (device -> device, copy-on-write) — sources may be reused by swap_in below;
//   3. swap_in    (host -> device);
//   4. the forward pass over `seqs`, writing the KV of token_ids at
//      [start_position, num_computed_tokens_after) through block_table.
// The scheduler never swaps in during a step that swapped out, so host blocks never conflict.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/block_manager.h"
#include "worker/engine/clock.h"
#include "worker/engine/request.h"

namespace xserv::engine {

// The token a continued decode feeds (ScheduledSequence::continues): not known when planned.
inline constexpr int32_t kPendingToken = -1;

struct ScheduledSequence {
  RequestId request_id = 0;
  std::vector<int32_t> token_ids;         // to feed this step: a prefill chunk or one decode token
  int32_t start_position = 0;             // tokens already in KV == position of token_ids[0]
  int32_t num_computed_tokens_after = 0;  // start_position + token_ids.size()
  // Full device table, covers ..._after slots; with a window table (BlockManagerConfig::
  // window_tokens) that table follows, as long again (released entries kReleasedBlock).
  std::vector<BlockId> block_table;
  // True when this step's last position yields a token to sample: every decode and the final
  // chunk of a prefill. Intermediate chunks only fill KV.
  bool samples = false;
  // First time this request is scheduled at all: send its sampling state to the runner/peers.
  bool is_new = false;
  // First step after a preemption (swap-in or recompute); token_ids may then contain tokens
  // generated earlier, which must not be streamed again.
  bool resumed = false;
  int32_t num_cached_tokens = 0;  // prefix-cache hit at (re)admission, else 0
  // Overlap scheduling: a decode planned while the request's previous step is still running;
  // token_ids is {kPendingToken}, the token that step samples for it. If that token ends the
  // request, this row's result is dropped (the request is gone by then).
  bool continues = false;
};

struct FinishedRequest {
  RequestId request_id = 0;
  FinishReason reason = FinishReason::kStop;
  std::string message;  // detail for kError / kAbort
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  Time arrival_time{};
};

struct StepPlan {
  uint64_t step_id = 0;
  // Order: running decodes, running prefill chunks, swapped-in, newly admitted.
  std::vector<ScheduledSequence> seqs;
  std::vector<BlockSwap> swap_out;
  std::vector<BlockCopy> copies;
  std::vector<BlockSwap> swap_in;
  std::vector<RequestId> preempted;  // preempted while building this plan
  // Requests that ended since the previous plan (results, aborts) or while building this one
  // (errors). The only report of a termination: each id appears exactly once, after which the
  // scheduler has forgotten it.
  std::vector<FinishedRequest> finished;
  int32_t num_batched_tokens = 0;  // sum of token_ids sizes

  bool HasWork() const { return !seqs.empty(); }
  // Block moves to execute even without work (e.g. a request that preempted itself).
  bool HasBlockOps() const { return !swap_out.empty() || !copies.empty() || !swap_in.empty(); }
};

struct SampledToken {
  RequestId request_id = 0;
  int32_t token_id = 0;
  // Set by the engine's stop logic (EOS / stop ids, honouring min_tokens and ignore_eos). The
  // scheduler itself ends requests only on max_tokens and max_model_len.
  bool stop = false;
};

struct StepResult {
  uint64_t step_id = 0;               // the plan's step_id
  std::vector<SampledToken> sampled;  // exactly one per plan entry with samples == true
};

}  // namespace xserv::engine
