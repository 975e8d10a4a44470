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
  // step (whose padding rows only a graph-capable backend accepts) is built. The ranks of a
  // replica run the same backend with the same options (the supervisor passes them alike), so
  // they answer alike; a rank started with capture-refusing options (profile_ops,
  // check_each_op) that its peers lack would fall out of step with them.
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
                               const kernels::Tensor& logits, const StageHandOff* handoff) {
  const int64_t bucket = Bucket(static_cast<int64_t>(chunks.size()));
  ASSIGN_OR_RETURN(ForwardInputs in,
                   builder_.Build(chunks, {.pad_seqs_to = bucket, .min_max_seq_len = max_seq_len_}));
  const kernels::Tensor rows = model_.is_last_stage() ? logits.SliceRows(0, bucket)
                                                      : kernels::Tensor{};
  // The forward pass of the padded step; a stage's hand-off around it (one token per sequence).
  const auto forward = [&]() -> absl::Status {
    if (handoff == nullptr) return model_.Forward(in, kv_.layers(), rows);
    const kernels::Tensor hidden = handoff->hidden.SliceRows(0, bucket);
    if (handoff->receive) RETURN_IF_ERROR(handoff->receive(hidden));
    RETURN_IF_ERROR(model_.Forward(in, kv_.layers(), rows, &hidden));
    return handoff->send ? handoff->send(hidden) : absl::OkStatus();
  };
  // Falling back alone would leave this rank running unpadded steps while its peers replay
  // padded ones: their collectives (TP) or hand-off sizes (PP) would no longer match. Fail the
  // step instead (the replica restarts; --cuda-graphs=false is the way out if captures keep
  // failing).
  const bool in_lockstep = model_.tp_size() > 1 || handoff != nullptr;
  Entry& e = entries_[bucket];
  if (e.graph >= 0 && e.logits == rows.data) return backend_.Replay(e.graph);
  if (!e.warmed) {
    e.warmed = true;
    return forward();
  }
  if (absl::Status begin = backend_.BeginCapture(); !begin.ok()) {
    if (in_lockstep) return begin;
    enabled_ = false;
    spdlog::info("decode graphs off: {}", begin.ToString());
    return forward();
  }
  const absl::Status ran = forward();
  absl::StatusOr<int64_t> graph = backend_.EndCapture();
  if ((!ran.ok() || !graph.ok()) && in_lockstep) {
    return absl::InternalError(absl::StrCat(
        "decode graph capture of ", bucket, " rows failed on a ",
        handoff != nullptr ? "pipeline stage" : "tensor-parallel rank", ": ",
        (!ran.ok() ? ran : graph.status()).ToString()));
  }
  if (!ran.ok() || !graph.ok()) {
    // Nothing ran during the capture: turn graphs off and run the step directly.
    enabled_ = false;
    spdlog::warn("decode graphs off after a failed capture of {} rows: {}", bucket,
                 (!ran.ok() ? ran : graph.status()).ToString());
    return forward();
  }
  e.graph = *graph;
  e.logits = rows.data;
  spdlog::debug("captured the decode forward of {} rows as graph {}", bucket, e.graph);
  return backend_.Replay(e.graph);
}

}  // namespace xserv::model
