// DecodeGraphs: runs decode steps (every sequence one new token, logits of it) as replays of a
// captured forward pass (Backend graphs: CUDA graphs on the GPU), removing the launch cost of
// the ~20 small kernels per layer that dominate small batches.
//
// A graph has fixed shapes, so a step is padded up to a bucket of sequences (BuildOptions: the
// padding rows write nothing), and attention is planned for max_seq_len positions whatever the
// step's lengths (its kernels read the real lengths on the device). The first step of a bucket
// runs directly, which also performs the lazy set-up (GEMM plans, scratch growth) a capture must
// not do; the second captures and replays, later ones replay. Every row's result is that of a
// direct run with the same kernels: padding never changes another row (the kernels are row-wise
// or, for attention, split the same way).
//
// Tensor-parallel ranks (EngineConfig::graphs_with_collectives) each hold one, leader and peers
// alike: they run the same plans, so they pad, capture and replay the same steps, and the
// all-reduces are captured with the kernels. Pipeline stages with a device hand-off (opt-in:
// EngineConfig::graphs_with_pipeline) capture their receive, layers and send as one graph
// (StageHandOff). On either, a capture that fails fails the step rather than let one rank fall
// back alone. Owned and used by the engine-loop (or peer-loop) thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "worker/model/batch_builder.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"

namespace xserv::model {

// A pipeline stage's hand-off, made part of its graphs: the previous stage's hidden rows arrive
// in `hidden` before this stage's layers and leave from it after (device-to-device calls on the
// captured stream). Null functions: the first stage receives nothing, the last sends nothing.
struct StageHandOff {
  kernels::Tensor hidden;  // [>= the largest bucket, hidden size], the same buffer every step
  std::function<absl::Status(const kernels::Tensor&)> receive, send;
};

class DecodeGraphs {
 public:
  // max_seqs: the largest bucket (at most the builder's max_seqs and the logits rows the caller
  // will pass); max_seq_len: the longest sequence a step may hold (the model's context).
  DecodeGraphs(kernels::Backend& backend, Model& model, KvCache& kv, BatchBuilder& builder,
               int64_t max_seqs, int max_seq_len);

  // Whether Run takes this step: decode-only, within max_seqs, and graphs still work (a backend
  // without them, or a failed capture, turns them off for good).
  bool Accepts(std::span<const SequenceChunk> chunks) const;

  // Runs the step; logits rows [0, chunks.size()) of `logits` ([>= bucket, vocab] of a stable
  // buffer; empty on a stage before the last) receive the results, the padding rows after them
  // are scratch. `handoff`: this rank is a pipeline stage.
  absl::Status Run(std::span<const SequenceChunk> chunks, const kernels::Tensor& logits,
                   const StageHandOff* handoff = nullptr);

  // The bucket (padded sequence count) of a step of `seqs` sequences.
  static int64_t Bucket(int64_t seqs);

 private:
  struct Entry {
    bool warmed = false;
    int64_t graph = -1;
    void* logits = nullptr;  // the buffer the graph writes; another one means capture again
  };

  kernels::Backend& backend_;
  Model& model_;
  KvCache& kv_;
  BatchBuilder& builder_;
  int64_t max_seqs_;
  int max_seq_len_;
  bool enabled_ = true;
  std::map<int64_t, Entry> entries_;
};

}  // namespace xserv::model
