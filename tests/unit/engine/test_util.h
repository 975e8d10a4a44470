// Small helpers shared by the scheduler tests. Single-threaded test code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/scheduler.h"

namespace xserv::engine::testing {

inline constexpr int32_t kVocab = 1000;

// A scheduler config with room for everything; tests shrink what they exercise.
inline SchedulerConfig RoomyConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 1024;
  c.admission_watermark = 0.f;
  c.blocks = {.num_device_blocks = 256, .block_size = 16, .num_host_blocks = 256,
              .enable_prefix_caching = true};
  return c;
}

inline std::unique_ptr<Scheduler> MakeScheduler(const SchedulerConfig& config,
                                                const Clock* clock) {
  auto s = Scheduler::Create(config, clock);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Deterministic pseudo-random prompt; different seeds give different first tokens.
inline std::vector<int32_t> Prompt(int32_t length, uint32_t seed) {
  std::vector<int32_t> p(length);
  uint32_t x = seed * 2654435761u + 12345u;
  for (int32_t& t : p) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<int32_t>((x >> 8) % kVocab);
  }
  return p;
}

inline RequestSpec Spec(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens,
                        int32_t priority = 0) {
  RequestSpec spec;
  spec.id = id;
  spec.prompt_token_ids = std::move(prompt);
  spec.max_tokens = max_tokens;
  spec.priority = priority;
  return spec;
}

inline StepResult Result(uint64_t step_id, std::vector<SampledToken> sampled = {}) {
  StepResult result;
  result.step_id = step_id;
  result.sampled = std::move(sampled);
  return result;
}

inline SampledToken Token(RequestId id, int32_t token_id) {
  return {.request_id = id, .token_id = token_id, .stop = false};
}

// Token `token` for every sampling entry of `plan`; it ends request `stop_id` (0: none).
inline StepResult SampleAll(const StepPlan& plan, int32_t token = 7, RequestId stop_id = 0) {
  StepResult result{.step_id = plan.step_id};
  for (const ScheduledSequence& s : plan.seqs) {
    if (!s.samples) continue;
    result.sampled.push_back(
        {.request_id = s.request_id, .token_id = token, .stop = s.request_id == stop_id});
  }
  return result;
}

// Everything a plan says, as text, to compare runs.
inline std::string Digest(const StepPlan& plan) {
  std::string out;
  absl::StrAppend(&out, "step ", plan.step_id, ":");
  for (const ScheduledSequence& s : plan.seqs) {
    absl::StrAppend(&out, " [", s.request_id, " @", s.start_position, " n", s.token_ids.size(),
                    s.samples ? " S" : "", s.is_new ? " N" : "", s.resumed ? " R" : "", " t");
    for (BlockId b : s.block_table) absl::StrAppend(&out, ",", b);
    absl::StrAppend(&out, "]");
  }
  for (const BlockSwap& op : plan.swap_out) absl::StrAppend(&out, " o", op.src, ">", op.dst);
  for (const BlockCopy& op : plan.copies) absl::StrAppend(&out, " c", op.src, ">", op.dst);
  for (const BlockSwap& op : plan.swap_in) absl::StrAppend(&out, " i", op.src, ">", op.dst);
  for (RequestId id : plan.preempted) absl::StrAppend(&out, " p", id);
  for (const FinishedRequest& f : plan.finished) {
    absl::StrAppend(&out, " f", f.request_id, ":", static_cast<int>(f.reason));
  }
  absl::StrAppend(&out, "\n");
  return out;
}

inline const ScheduledSequence* FindSeq(const StepPlan& plan, RequestId id) {
  for (const ScheduledSequence& s : plan.seqs) {
    if (s.request_id == id) return &s;
  }
  return nullptr;
}

}  // namespace xserv::engine::testing
