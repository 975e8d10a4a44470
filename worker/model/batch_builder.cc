#include "worker/model/batch_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::model {

absl::StatusOr<BatchBuilder> BatchBuilder::Create(kernels::Backend& backend,
                                                  const BatchLimits& limits) {
  if (limits.max_tokens < 1 || limits.max_seqs < 1 || limits.max_blocks_per_seq < 1 ||
      limits.block_size < 1) {
    return absl::InvalidArgumentError("BatchBuilder: every limit must be positive");
  }
  BatchBuilder b(backend, limits);
  const kernels::DType i32 = kernels::DType::kI32;
  ASSIGN_OR_RETURN(b.token_ids_, backend.Allocate(i32, {limits.max_tokens}));
  ASSIGN_OR_RETURN(b.positions_, backend.Allocate(i32, {limits.max_tokens}));
  ASSIGN_OR_RETURN(b.query_start_, backend.Allocate(i32, {limits.max_seqs + 1}));
  ASSIGN_OR_RETURN(b.seq_lens_, backend.Allocate(i32, {limits.max_seqs}));
  ASSIGN_OR_RETURN(b.block_tables_,
                   backend.Allocate(i32, {limits.max_seqs, limits.max_blocks_per_seq}));
  ASSIGN_OR_RETURN(b.slot_mapping_, backend.Allocate(i32, {limits.max_tokens}));
  ASSIGN_OR_RETURN(b.logits_indices_, backend.Allocate(i32, {limits.max_tokens}));
  if (limits.window_tables) {
    ASSIGN_OR_RETURN(b.window_block_tables_,
                     backend.Allocate(i32, {limits.max_seqs, limits.max_blocks_per_seq}));
    ASSIGN_OR_RETURN(b.window_slot_mapping_, backend.Allocate(i32, {limits.max_tokens}));
  }
  return b;
}

absl::StatusOr<ForwardInputs> BatchBuilder::Build(std::span<const SequenceChunk> chunks,
                                                  const BuildOptions& options) {
  const int64_t real_seqs = static_cast<int64_t>(chunks.size());
  const int64_t num_seqs = std::max(real_seqs, options.pad_seqs_to);
  if (real_seqs < 1 || num_seqs > limits_.max_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("step has ", num_seqs, " sequences, limit ", limits_.max_seqs));
  }
  host_tokens_.clear();
  host_positions_.clear();
  host_slots_.clear();
  host_logits_indices_.clear();
  host_query_start_.assign(1, 0);
  host_seq_lens_.clear();
  host_block_tables_.assign(num_seqs * limits_.max_blocks_per_seq, 0);
  host_window_slots_.clear();
  if (limits_.window_tables)
    host_window_block_tables_.assign(num_seqs * limits_.max_blocks_per_seq, 0);
  int max_query_len = 0, max_seq_len = options.min_max_seq_len;
  uint32_t query_len_mask = 0;
  const auto note_query_len = [&query_len_mask](int64_t n) {
    query_len_mask |= uint32_t{1} << std::min<int64_t>(n - 1, 31);
  };
  for (int64_t s = 0; s < real_seqs; ++s) {
    const SequenceChunk& c = chunks[s];
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    const int64_t end = c.start_position + n;
    const int64_t blocks_needed = (end + limits_.block_size - 1) / limits_.block_size;
    // With window tables the chunk's table is the full one, then the window one.
    if (limits_.window_tables && c.block_table.size() % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, ": an odd table of ", c.block_table.size(),
                       " entries cannot hold a full and a window table"));
    }
    const std::span<const int32_t> table =
        limits_.window_tables ? c.block_table.first(c.block_table.size() / 2) : c.block_table;
    if (n < 1 || c.start_position < 0 || blocks_needed > static_cast<int64_t>(table.size()) ||
        static_cast<int64_t>(table.size()) > limits_.max_blocks_per_seq) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, ": ", n, " tokens from position ", c.start_position,
                       " need ", blocks_needed, " blocks, table has ", table.size(), " (limit ",
                       limits_.max_blocks_per_seq, ")"));
    }
    if (limits_.window_tables) {
      const std::span<const int32_t> window = c.block_table.last(table.size());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = c.start_position + i;
        const int32_t block = window[pos / limits_.block_size];
        if (block < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "sequence ", s, ": the window table has no block for new position ", pos));
        }
        host_window_slots_.push_back(
            static_cast<int32_t>(block * limits_.block_size + pos % limits_.block_size));
      }
      std::copy(window.begin(), window.end(),
                host_window_block_tables_.begin() + s * limits_.max_blocks_per_seq);
    }
    const int64_t row0 = static_cast<int64_t>(host_tokens_.size());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = c.start_position + i;
      host_tokens_.push_back(c.tokens[i]);
      host_positions_.push_back(static_cast<int32_t>(pos));
      host_slots_.push_back(static_cast<int32_t>(
          table[pos / limits_.block_size] * limits_.block_size + pos % limits_.block_size));
    }
    if (c.logits == LogitsRows::kLast) host_logits_indices_.push_back(row0 + n - 1);
    if (c.logits == LogitsRows::kAll) {
      for (int64_t i = 0; i < n; ++i) host_logits_indices_.push_back(row0 + i);
    }
    host_query_start_.push_back(static_cast<int32_t>(row0 + n));
    host_seq_lens_.push_back(static_cast<int32_t>(end));
    std::copy(table.begin(), table.end(),
              host_block_tables_.begin() + s * limits_.max_blocks_per_seq);
    max_query_len = std::max<int>(max_query_len, n);
    note_query_len(n);
    max_seq_len = std::max<int>(max_seq_len, end);
  }
  for (int64_t s = real_seqs; s < num_seqs; ++s) {  // padding (BuildOptions)
    const auto row = static_cast<int32_t>(host_tokens_.size());
    host_tokens_.push_back(0);
    host_positions_.push_back(0);
    host_slots_.push_back(-1);
    if (limits_.window_tables) host_window_slots_.push_back(-1);
    host_logits_indices_.push_back(row);
    host_query_start_.push_back(row + 1);
    host_seq_lens_.push_back(1);
    max_query_len = std::max(max_query_len, 1);
    note_query_len(1);
    max_seq_len = std::max(max_seq_len, 1);
  }
  const int64_t tokens = static_cast<int64_t>(host_tokens_.size());
  if (tokens > limits_.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("step has ", tokens, " tokens, limit ", limits_.max_tokens));
  }
  ForwardInputs in;
  in.token_ids = token_ids_.view().SliceRows(0, tokens);
  in.positions = positions_.view().SliceRows(0, tokens);
  in.logits_indices =
      logits_indices_.view().SliceRows(0, static_cast<int64_t>(host_logits_indices_.size()));
  in.attention.query_start = query_start_.view().SliceRows(0, num_seqs + 1);
  in.attention.seq_lens = seq_lens_.view().SliceRows(0, num_seqs);
  in.attention.block_tables = block_tables_.view().SliceRows(0, num_seqs);
  in.attention.slot_mapping = slot_mapping_.view().SliceRows(0, tokens);
  in.attention.num_seqs = static_cast<int>(num_seqs);
  in.attention.max_query_len = max_query_len;
  in.attention.query_len_mask = query_len_mask;
  in.attention.max_seq_len = max_seq_len;
  in.attention.block_size = static_cast<int>(limits_.block_size);
  RETURN_IF_ERROR(backend_->CopyFromHost(host_tokens_.data(), in.token_ids));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_positions_.data(), in.positions));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_logits_indices_.data(), in.logits_indices));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_query_start_.data(), in.attention.query_start));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_seq_lens_.data(), in.attention.seq_lens));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_block_tables_.data(), in.attention.block_tables));
  RETURN_IF_ERROR(backend_->CopyFromHost(host_slots_.data(), in.attention.slot_mapping));
  if (limits_.window_tables) {
    in.has_window_attention = true;
    in.window_attention = in.attention;
    in.window_attention.block_tables = window_block_tables_.view().SliceRows(0, num_seqs);
    in.window_attention.slot_mapping = window_slot_mapping_.view().SliceRows(0, tokens);
    RETURN_IF_ERROR(
        backend_->CopyFromHost(host_window_block_tables_.data(), in.window_attention.block_tables));
    RETURN_IF_ERROR(
        backend_->CopyFromHost(host_window_slots_.data(), in.window_attention.slot_mapping));
  }
  return in;
}

}  // namespace xserv::model
