#include "worker/model/decode_graphs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace xserv::model {

DecodeGraphs::DecodeGraphs(kernels::Backend& backend, Model& model, KvCache& kv,
                           BatchBuilder& builder, int64_t max_seqs, int max_seq_len)
    : backend_(backend),
      model_(model),
      kv_(kv),
      builder_(builder),
      max_seqs_(std::min(max_seqs, builder.limits().max_seqs)),
      max_seq_len_(max_seq_len) {
  // Probe once with an empty capture: backends without graphs say so here, before any padded
  // step (whose padding rows only a graph-capable backend accepts) is built.
  absl::Status begin = backend_.BeginCapture();
  if (begin.ok()) begin = backend_.EndCapture().status();
  if (!begin.ok()) {
    enabled_ = false;
    spdlog::info("decode graphs off: {}", begin.ToString());
  }
}

int64_t DecodeGraphs::Bucket(int64_t seqs) {
  // Powers of two up to 32, then steps of 32: at most 1/33 of a large step is padding.
  if (seqs <= 32) {
    int64_t b = 1;
    while (b < seqs) b *= 2;
    return b;
  }
  return (seqs + 31) / 32 * 32;
}

bool DecodeGraphs::Accepts(std::span<const SequenceChunk> chunks) const {
  if (!enabled_ || chunks.empty() || Bucket(static_cast<int64_t>(chunks.size())) > max_seqs_) {
    return false;
  }
  return std::all_of(chunks.begin(), chunks.end(), [](const SequenceChunk& c) {
    return c.tokens.size() == 1 && c.logits == LogitsRows::kLast;
  });
}

absl::Status DecodeGraphs::Run(std::span<const SequenceChunk> chunks,
                               const kernels::Tensor& logits) {
  const int64_t bucket = Bucket(static_cast<int64_t>(chunks.size()));
  ASSIGN_OR_RETURN(ForwardInputs in,
                   builder_.Build(chunks, {.pad_seqs_to = bucket, .min_max_seq_len = max_seq_len_}));
  const kernels::Tensor rows = logits.SliceRows(0, bucket);
  Entry& e = entries_[bucket];
  if (e.graph >= 0 && e.logits == rows.data) return backend_.Replay(e.graph);
  if (!e.warmed) {
    e.warmed = true;
    return model_.Forward(in, kv_.layers(), rows);
  }
  if (absl::Status begin = backend_.BeginCapture(); !begin.ok()) {
    enabled_ = false;
    spdlog::info("decode graphs off: {}", begin.ToString());
    return model_.Forward(in, kv_.layers(), rows);
  }
  const absl::Status forward = model_.Forward(in, kv_.layers(), rows);
  absl::StatusOr<int64_t> graph = backend_.EndCapture();
  if ((!forward.ok() || !graph.ok()) && model_.tp_size() > 1) {
    // Falling back alone would leave this rank running unpadded steps while its peers replay
    // padded ones: their collectives would no longer match. Fail the step (the replica restarts;
    // --cuda-graphs=false is the way out if captures keep failing).
    return absl::InternalError(absl::StrCat(
        "decode graph capture of ", bucket, " rows failed on a tensor-parallel rank: ",
        (!forward.ok() ? forward : graph.status()).ToString()));
  }
  if (!forward.ok() || !graph.ok()) {
    // Nothing ran during the capture: turn graphs off and run the step directly.
    enabled_ = false;
    spdlog::warn("decode graphs off after a failed capture of {} rows: {}", bucket,
                 (!forward.ok() ? forward : graph.status()).ToString());
    return model_.Forward(in, kv_.layers(), rows);
  }
  e.graph = *graph;
  e.logits = rows.data;
  spdlog::debug("captured the decode forward of {} rows as graph {}", bucket, e.graph);
  return backend_.Replay(e.graph);
}

}  // namespace xserv::model
