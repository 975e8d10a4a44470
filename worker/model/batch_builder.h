// BatchBuilder: turns the host-side description of one step (which tokens of which sequences, at
// which positions, with which block tables, and which rows need logits) into ForwardInputs on the
// backend. Device buffers are allocated once for the largest step and reused (one upload per
// tensor per step).
//
// Owned and used by the engine-loop thread only.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/model.h"

namespace xserv::model {

enum class LogitsRows { kNone, kLast, kAll };

// One sequence's part of a step: `tokens` at positions start_position, start_position + 1, ...
struct SequenceChunk {
  std::span<const int32_t> tokens;
  int32_t start_position = 0;  // tokens already in the KV cache
  // Physical blocks covering start_position + size; with BatchLimits::window_tables the
  // sliding-window layers' table follows, as long again (entries before the window may be -1).
  std::span<const int32_t> block_table;
  LogitsRows logits = LogitsRows::kLast;
};

struct BatchLimits {
  int64_t max_tokens = 2048;
  int64_t max_seqs = 256;
  int64_t max_blocks_per_seq = 256;
  int64_t block_size = 16;
  // Chunks carry a window table after the full one (worker/engine/block_manager.h), which
  // becomes ForwardInputs::window_attention.
  bool window_tables = false;
};

// Extras of graph replays (decode_graphs.h): shapes fixed per bucket.
struct BuildOptions {
  // Append one-token padding sequences up to this many (0: none). A padding row reads position 0
  // through an all-zero block table, writes no KV (slot -1) and gets a logits row nobody reads.
  int64_t pad_seqs_to = 0;
  // Attention's max_seq_len at least this (its split count is part of a graph's shape).
  int min_max_seq_len = 0;
};

class BatchBuilder {
 public:
  static absl::StatusOr<BatchBuilder> Create(kernels::Backend& backend, const BatchLimits& limits);

  // Logits rows are ordered sequence by sequence, position by position.
  absl::StatusOr<ForwardInputs> Build(std::span<const SequenceChunk> chunks,
                                      const BuildOptions& options = {});

  const BatchLimits& limits() const { return limits_; }

 private:
  BatchBuilder(kernels::Backend& backend, const BatchLimits& limits)
      : backend_(&backend), limits_(limits) {}

  kernels::Backend* backend_;
  BatchLimits limits_;
  kernels::Buffer token_ids_, positions_, query_start_, seq_lens_, block_tables_, slot_mapping_,
      logits_indices_, window_block_tables_, window_slot_mapping_;
  std::vector<int32_t> host_tokens_, host_positions_, host_query_start_, host_seq_lens_,
      host_block_tables_, host_slots_, host_logits_indices_, host_window_block_tables_,
      host_window_slots_;
};

}  // namespace xserv::model
