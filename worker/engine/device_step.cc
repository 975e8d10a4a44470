#include "worker/engine/device_step.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::engine {
namespace {

// Encoding: u8 kind, then three pair lists and the chunks, every count and value an i32:
//   pairs:  n, (src, dst) * n
//   chunks: n, then per chunk: logits mode, start_position, #tokens, tokens, #blocks, blocks
class Writer {
 public:
  void I32(int32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    out_.append(b, 4);
  }
  void Ints(const std::vector<int32_t>& v) {
    I32(static_cast<int32_t>(v.size()));
    const size_t offset = out_.size();
    out_.resize(offset + v.size() * 4);
    if (!v.empty()) std::memcpy(out_.data() + offset, v.data(), v.size() * 4);
  }
  void Pairs(const std::vector<std::pair<int32_t, int32_t>>& v) {
    I32(static_cast<int32_t>(v.size()));
    for (const auto& [a, b] : v) I32(a), I32(b);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool I32(int32_t& v) {
    if (in_.size() - pos_ < 4) return false;
    std::memcpy(&v, in_.data() + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool Count(int32_t& n, size_t element_bytes) {
    return I32(n) && n >= 0 && static_cast<size_t>(n) * element_bytes <= in_.size() - pos_;
  }
  bool Ints(std::vector<int32_t>& v) {
    int32_t n = 0;
    if (!Count(n, 4)) return false;
    v.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), in_.data() + pos_, static_cast<size_t>(n) * 4);
    pos_ += static_cast<size_t>(n) * 4;
    return true;
  }
  bool Pairs(std::vector<std::pair<int32_t, int32_t>>& v) {
    int32_t n = 0;
    if (!Count(n, 8)) return false;
    v.resize(static_cast<size_t>(n));
    for (auto& [a, b] : v) I32(a), I32(b);
    return true;
  }
  bool Byte(uint8_t& b) {
    if (pos_ >= in_.size()) return false;
    b = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

int64_t DeviceStep::LogitsRowCount() const {
  int64_t rows = 0;
  for (const DeviceChunk& c : chunks) {
    if (c.logits == model::LogitsRows::kAll) rows += static_cast<int64_t>(c.tokens.size());
    if (c.logits == model::LogitsRows::kLast) rows += 1;
  }
  return rows;
}

std::string SerializeDeviceStep(const DeviceStep& step) {
  Writer w;
  w.out().push_back(static_cast<char>(step.kind));
  w.Pairs(step.swap_out);
  w.Pairs(step.copies);
  w.Pairs(step.swap_in);
  w.I32(static_cast<int32_t>(step.chunks.size()));
  for (const DeviceChunk& c : step.chunks) {
    w.I32(static_cast<int32_t>(c.logits));
    w.I32(c.start_position);
    w.Ints(c.tokens);
    w.Ints(c.block_table);
  }
  return std::move(w.out());
}

absl::StatusOr<DeviceStep> ParseDeviceStep(std::string_view bytes) {
  const auto bad = [](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("malformed device step: ", what));
  };
  Reader r(bytes);
  DeviceStep step;
  uint8_t kind = 0;
  if (!r.Byte(kind) || kind > static_cast<uint8_t>(DeviceStep::Kind::kStop)) return bad("kind");
  step.kind = static_cast<DeviceStep::Kind>(kind);
  if (!r.Pairs(step.swap_out) || !r.Pairs(step.copies) || !r.Pairs(step.swap_in)) {
    return bad("block moves");
  }
  int32_t chunks = 0;
  if (!r.Count(chunks, 16)) return bad("chunk count");
  step.chunks.resize(static_cast<size_t>(chunks));
  for (DeviceChunk& c : step.chunks) {
    int32_t mode = 0;
    if (!r.I32(mode) || mode < 0 || mode > static_cast<int32_t>(model::LogitsRows::kAll)) {
      return bad("logits mode");
    }
    c.logits = static_cast<model::LogitsRows>(mode);
    if (!r.I32(c.start_position) || !r.Ints(c.tokens) || !r.Ints(c.block_table)) {
      return bad("chunk");
    }
  }
  if (!r.done()) return bad("trailing bytes");
  return step;
}

absl::Status DeviceStepRunner::ReceiveHidden(const kernels::Tensor& hidden, int tag) {
  if (link_.comm->memory() == parallel::MemoryKind::kDevice) {  // NCCL: into the buffer, in order
    return link_.comm->Recv({static_cast<std::byte*>(hidden.data), hidden.nbytes()},
                            link_.prev_rank, tag);
  }
  staging_.resize(hidden.nbytes());
  RETURN_IF_ERROR(link_.comm->Recv(staging_, link_.prev_rank, tag));
  return backend_.CopyFromHost(staging_.data(), hidden);
}

absl::Status DeviceStepRunner::SendHidden(const kernels::Tensor& hidden, int tag) {
  if (link_.comm->memory() == parallel::MemoryKind::kDevice) {
    // NCCL: enqueued on the compute stream, so the next step's writes to `hidden` come after it
    // and the host does not wait.
    return link_.comm->StartSend({static_cast<const std::byte*>(hidden.data), hidden.nbytes()},
                                 link_.next_rank, tag);
  }
  // The send completes only once the next stage takes it, which may be after this stage has
  // run the following steps (the leader keeps several in flight): wait only for the send whose
  // buffer is needed again.
  const size_t ring = static_cast<size_t>(std::max(1, link_.max_in_flight));
  send_staging_.resize(ring);
  RETURN_IF_ERROR(link_.comm->WaitSends(ring - 1));
  std::vector<std::byte>& staging = send_staging_[num_sent_++ % ring];
  staging.resize(hidden.nbytes());
  RETURN_IF_ERROR(backend_.CopyToHost(hidden, staging.data()));
  return link_.comm->StartSend(staging, link_.next_rank, tag);
}

absl::Status DeviceStepRunner::Finish() {
  if (link_.comm == nullptr) return absl::OkStatus();
  return link_.comm->WaitSends();
}

absl::StatusOr<kernels::Tensor> DeviceStepRunner::Run(const DeviceStep& step) {
  RETURN_IF_ERROR(kv_.SwapOut(step.swap_out));
  RETURN_IF_ERROR(kv_.CopyBlocks(step.copies));
  RETURN_IF_ERROR(kv_.SwapIn(step.swap_in));
  if (step.chunks.empty()) return kernels::Tensor{};
  std::vector<model::SequenceChunk> chunks;
  chunks.reserve(step.chunks.size());
  int64_t tokens = 0;
  for (const DeviceChunk& c : step.chunks) {
    chunks.push_back(model::SequenceChunk{.tokens = c.tokens,
                                          .start_position = c.start_position,
                                          .block_table = c.block_table,
                                          .logits = c.logits});
    tokens += static_cast<int64_t>(c.tokens.size());
  }
  if (link_.comm != nullptr && hidden_.empty()) {
    // Before any graph captures its address.
    ASSIGN_OR_RETURN(hidden_, backend_.Allocate(backend_.compute_dtype(),
                                                {model_.max_num_tokens(),
                                                 model_.config().hidden_size}));
  }
  // Graphs: a single stage, or a pipeline stage whose hand-off is device to device (the graphs
  // exist only then: MakeDecodeGraphs). Every stage decides alike: Accepts depends on the step
  // and the limits only, and the logits rows bound only the last stage.
  const bool device_link =
      link_.comm != nullptr && link_.comm->memory() == parallel::MemoryKind::kDevice;
  if (graphs_ != nullptr && (link_.comm == nullptr || device_link) && graphs_->Accepts(chunks) &&
      (!model_.is_last_stage() ||
       model::DecodeGraphs::Bucket(static_cast<int64_t>(chunks.size())) <=
           logits_.view().dim(0))) {
    if (link_.comm == nullptr) {
      RETURN_IF_ERROR(graphs_->Run(chunks, logits_.view()));
    } else {
      ++forward_steps_;  // as the direct path counts its tags
      model::StageHandOff handoff{.hidden = hidden_.view()};
      if (link_.prev_rank >= 0) {
        handoff.receive = [this](const kernels::Tensor& h) { return ReceiveHidden(h, 0); };
      }
      if (link_.next_rank >= 0) {
        handoff.send = [this](const kernels::Tensor& h) { return SendHidden(h, 0); };
      }
      RETURN_IF_ERROR(graphs_->Run(
          chunks, model_.is_last_stage() ? logits_.view() : kernels::Tensor{}, &handoff));
    }
    if (!model_.is_last_stage()) return kernels::Tensor{};
    return logits_.view().SliceRows(0, step.LogitsRowCount());
  }
  ASSIGN_OR_RETURN(model::ForwardInputs inputs, builder_.Build(chunks));
  const int tag = static_cast<int>(forward_steps_++ & 0x3fffffff);
  const kernels::Tensor* hidden = nullptr;
  kernels::Tensor hidden_rows;
  if (link_.comm != nullptr) {
    hidden_rows = hidden_.view().SliceRows(0, tokens);
    hidden = &hidden_rows;
    if (link_.prev_rank >= 0) RETURN_IF_ERROR(ReceiveHidden(hidden_rows, tag));
  }
  kernels::Tensor logits;
  if (model_.is_last_stage()) {
    const int64_t rows = step.LogitsRowCount();
    const int64_t vocab = model_.config().vocab_size;
    if (rows > logits_.view().dim(0)) {  // prompt logprobs of a long chunk
      ASSIGN_OR_RETURN(logits_, backend_.Allocate(kernels::DType::kF32, {rows, vocab}));
    }
    logits = logits_.view().SliceRows(0, rows);
  }
  RETURN_IF_ERROR(model_.Forward(inputs, kv_.layers(), logits, hidden));
  if (link_.comm != nullptr && link_.next_rank >= 0) {
    RETURN_IF_ERROR(SendHidden(hidden_rows, tag));
  }
  return logits;
}

}  // namespace xserv::engine
