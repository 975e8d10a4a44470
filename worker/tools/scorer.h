// Scorer: the core of xserv-score. Runs a whole token sequence through a model as one prefill
// (in chunks of the workspace size, continuing from the KV cache), takes the log-softmax of the
// logits at every position, and reports the log-probability of each token given its prefix and
// the top-k next-token alternatives after each position.
//
// Ownership and threading: a Scorer owns its model, KV cache and step buffers on a backend the
// caller owns (which must outlive it). One thread at a time; sequences are scored one by one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/batch_builder.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"

namespace xserv::tools {

struct ScorerOptions {
  int chunk_tokens = 256;  // tokens per forward pass; sizes the workspace and logits buffer
  int64_t block_size = 16;
};

struct TokenScores {
  // logprobs[i] = log p(ids[i] | ids[0..i)); nullopt for i = 0, which has no prefix.
  std::vector<std::optional<float>> logprobs;
  // top[i] = the k most likely tokens after ids[0..i], by descending logprob, ties lower id first.
  std::vector<std::vector<std::pair<int32_t, float>>> top;
};

class Scorer {
 public:
  static absl::StatusOr<std::unique_ptr<Scorer>> Create(const std::string& model_dir,
                                                        kernels::Backend& backend,
                                                        const ScorerOptions& options);

  const ModelConfig& config() const { return model_->config(); }
  void set_activation_observer(model::ActivationObserver observer) {
    model_->set_activation_observer(std::move(observer));
  }

  // InvalidArgument unless ids is non-empty, every id is in [0, vocab_size) and the sequence fits
  // the model's max_position_embeddings.
  absl::Status CheckIds(std::span<const int64_t> ids) const;

  // top_k is clamped to [0, vocab_size].
  absl::StatusOr<TokenScores> Score(std::span<const int64_t> ids, int top_k);

 private:
  Scorer(kernels::Backend& backend, const ScorerOptions& options, std::unique_ptr<model::Model> m,
         model::BatchBuilder builder, kernels::Buffer logits)
      : backend_(&backend),
        options_(options),
        model_(std::move(m)),
        builder_(std::move(builder)),
        logits_(std::move(logits)) {}

  // Grows the KV cache (allocated lazily) to at least `blocks` blocks.
  absl::Status EnsureKvBlocks(int64_t blocks);

  kernels::Backend* backend_;
  ScorerOptions options_;
  std::unique_ptr<model::Model> model_;
  model::BatchBuilder builder_;
  kernels::Buffer logits_;  // f32 [chunk_tokens, vocab]
  std::unique_ptr<model::KvCache> kv_;
  std::vector<float> host_logprobs_;  // one chunk's rows, reused
};

// Top-k (descending value, ties lower index first) of one row of `values`.
std::vector<std::pair<int32_t, float>> TopK(std::span<const float> values, int k);

// The JSON-lines adapter: {"ids": [...]} -> {"logprobs": [null, ...], "top": [[[id, lp], ...]]},
// or {"error": "..."} for a malformed request or a failed forward pass. Never throws. The reply
// has no trailing newline.
std::string ScoreJsonLine(Scorer& scorer, std::string_view line, int top_k);

}  // namespace xserv::tools
