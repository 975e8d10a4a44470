// SchedulerConfig and the scheduling policies it selects.
//
// Plain data, built once at start-up (from flags) and copied into the Scheduler; Validate()
// before use. Any thread may read a config; only the engine-loop thread uses the scheduler.
#pragma once

#include <algorithm>
#include <cstdint>
#include <variant>

#include "absl/status/status.h"
#include "worker/engine/block_manager.h"
#include "worker/engine/request.h"

namespace xserv::engine {

// First come, first served: arrival order only.
struct FcfsPolicy {
  QueueKey Key(int32_t /*priority*/, uint64_t arrival_seq) const {
    return {.rank = 0, .arrival_seq = arrival_seq};
  }
};

// Lower priority value first; equal priorities in arrival order.
struct PriorityPolicy {
  QueueKey Key(int32_t priority, uint64_t arrival_seq) const {
    return {.rank = priority, .arrival_seq = arrival_seq};
  }
};

// The same key orders the waiting, running and swapped queues: the front is served first and
// the back of the running queue is the first preemption victim.
using SchedulingPolicy = std::variant<FcfsPolicy, PriorityPolicy>;

enum class PreemptionMode : uint8_t {
  kSwap,       // copy the victim's KV to the host pool; falls back to recompute when it is full
  kRecompute,  // drop the victim's KV; it prefills prompt + generated tokens again later
};

struct SchedulerConfig {
  int32_t max_num_seqs = 256;              // running sequences per step
  int32_t max_num_batched_tokens = 2048;   // tokens fed per step (decodes + prefill chunks)
  int32_t max_model_len = 4096;            // prompt + generated tokens per request
  bool enable_chunked_prefill = true;
  // Per-request cap on one prefill chunk (0 = none): stops one long prompt from taking the
  // whole budget while others wait to start.
  int32_t long_prefill_token_threshold = 0;
  SchedulingPolicy policy = FcfsPolicy{};
  PreemptionMode preemption_mode = PreemptionMode::kSwap;
  // Admission batching (TGI's max_waiting_tokens; 0 = off, every step admits, as vLLM does):
  // while requests run, new ones wait until this many steps have passed since the last
  // admission, until the waiting prompts would fill the step's token budget, or until a step
  // carries a prefill chunk anyway, then start together. Each step that carries prefill chunks is a mixed step that cannot replay a decode
  // graph, so batching admissions trades a few steps of TTFT for graphed decode steps.
  int32_t max_waiting_steps = 0;
  // New requests are admitted only while this fraction of the device pool stays free, so
  // running decodes do not preempt right after an admission. Ignored when nothing runs.
  float admission_watermark = 0.01f;
  BlockManagerConfig blocks;  // pool sizes, block size, enable_prefix_caching
  // Plans handed out before the oldest one's result comes back. 1: one step at a time. A
  // pipeline of P stages keeps P in flight (each with its own share of the running requests),
  // so every stage has a step to work on (cf. vLLM's virtual engines).
  int32_t max_in_flight_steps = 1;
  // Overlap scheduling (docs/overlap-scheduling.md; needs max_in_flight_steps == 2): the next
  // plan is made while the last one runs, and every request the running plan samples for (a
  // decode or a prompt's last chunk) goes on in the next one with a placeholder (kPendingToken)
  // for that token, which the engine fills in before the launch. Plans do not split the
  // requests (a pipeline's depth does).
  bool overlap_decodes = false;

  absl::Status Validate() const;

  // Logits rows of a step (one per sampled sequence; at most one per batched token): the size
  // of the engine's logits buffer and the largest decode step the graphs capture, the same on
  // every rank of a replica.
  int64_t MaxLogitsRows() const { return std::min(max_num_batched_tokens, max_num_seqs); }
};

// The step token budget a worker takes when none is given (--max-num-batched-tokens 0), for a
// device of `device_bytes` of memory (0: the CPU backend): 8192 from 70 GiB, else 2048, as
// vLLM's server picks. On one H200, Qwen3-8B bf16 served 128 in / 512 out at 256 concurrent
// requests: 18,430 -> 18,799 output tok/s and ITL p99 57 -> 24 ms with 8192 (a wave's prompts
// take 4 mixed steps instead of 16), TTFT p50 231 -> 602 ms, p99 957 -> 850 (docs/benchmarks
// session 26).
int32_t DefaultStepTokenBudget(uint64_t device_bytes);

}  // namespace xserv::engine
