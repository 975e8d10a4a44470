// Model: one decoder-only architecture (GPT-2, Llama family incl. Qwen2/Qwen3/Mistral, gpt-oss)
// written once against the op API (kernels/backend.h), so the same code runs on the CPU and CUDA
// backends.
//
// Ownership and threading: a Model owns its weights and scratch workspace on the backend it was
// loaded with; the backend must outlive it. Forward is called only by the engine-loop thread.
// The KV cache is owned by the caller (see kv_cache.h) and passed per step.
//
// Tensor parallelism (ModelLoadOptions::tp_size > 1): every rank of the group loads the same
// directory with its own tp_rank, backend and communicator, and holds only its shard (see
// tensor_parallel.h for the split). Every rank must call Forward for every step with the same
// ForwardInputs (same tokens, positions, block tables and slots: the KV block layout is the same
// on every rank, only the heads in a block differ) and its own KV cache sized by rank_config(),
// because Forward all-reduces twice per layer through the communicator. Every rank returns the
// full logits.
//
// Pipeline parallelism (ModelLoadOptions::pp_size > 1): the layers are split into pp_size
// contiguous stages (see pipeline_parallel.h); each stage loads only its layers, the first also
// the embedding, the last also the final norm and lm_head. Every stage runs Forward for every
// step with the same ForwardInputs (token_ids included: its length is the step's T, although only
// the first stage reads the ids) and its own KV cache (rank_config() holds only its layers). The
// residual stream passes between stages through Forward's `hidden`; the caller moves it. TP
// composes: each rank has a tp_rank and a pp_rank, and all-reduces within its stage's TP group.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"
#include "kernels/backend.h"

namespace xserv::parallel {
class Communicator;
}  // namespace xserv::parallel

namespace xserv::model {

// One step's inputs, already on the backend's device. Rows are tokens: the tokens of every
// scheduled sequence (prefill chunks and decode tokens), sequence after sequence.
struct ForwardInputs {
  kernels::Tensor token_ids;  // i32 [T]
  kernels::Tensor positions;  // i32 [T]: position of each token in its sequence
  kernels::AttentionBatch attention;
  kernels::Tensor logits_indices;  // i32 [L]: rows whose next-token logits are wanted
  // With window tables (BatchLimits::window_tables): `attention` with the sliding-window layers'
  // own block tables and KV slots, which those layers use instead.
  bool has_window_attention = false;
  kernels::AttentionBatch window_attention;
};

struct ModelLoadOptions {
  int max_num_tokens = 2048;  // most tokens one Forward may take (sizes the workspace)
  // Tensor parallelism: this rank's index in its group and the group's size. tp_size must divide
  // the attention heads and the (per-expert) intermediate size, and divide or be a multiple of
  // the KV heads; otherwise LoadModel fails with InvalidArgument naming the dimension.
  int tp_rank = 0;
  int tp_size = 1;
  // The group's communicator (rank tp_rank of tp_size), required when tp_size > 1. Not owned; it
  // must outlive the model and is used only inside Forward, on the thread that calls Forward.
  parallel::Communicator* tp_comm = nullptr;
  // Pipeline parallelism: this stage's index and the number of stages. pp_size must not exceed
  // the model's layers; otherwise LoadModel fails with InvalidArgument naming the numbers.
  int pp_rank = 0;
  int pp_size = 1;
  // > 0: quantise a BF16/F32 checkpoint's decoder linear weights (and gpt-oss experts) to FP8
  // E4M3 with this square block on load (WeightLoader::set_quantize_fp8_block); the kernels
  // still compute in the compute dtype. Refused for GPT-2 and for already quantised checkpoints.
  int64_t quantize_fp8_block = 0;
  // FP8 linear weights (an FP8 checkpoint's, or quantised on load) stay FP8 and go through
  // Backend::MatmulFp8 instead of being decoded to the compute dtype at load (half the bytes).
  bool fp8_matmuls = false;
  // The lm_head through FP8 too (xserv-worker --fp8-lm-head): 128 x 128 blocks (or
  // quantize_fp8_block's), quantised on load in a BF16 checkpoint and in an FP8 one alike (whose
  // lm_head is BF16), and kept FP8 under fp8_matmuls: half the bytes of the largest single weight
  // a decode step reads. Refused where the lm_head is the embedding (tied, GPT-2).
  bool fp8_lm_head = false;
  // > 0: the positions a RoPE model's cos/sin table covers (xserv-worker --max-model-len; at
  // least max_num_tokens, at most max_position_embeddings); 0: all of max_position_embeddings.
  // Positions past it must not reach Forward.
  int64_t max_positions = 0;
  // Start-up progress: (bytes read so far, checkpoint bytes), called on the loading thread.
  std::function<void(uint64_t, uint64_t)> on_progress;
};

// Called during Forward with named intermediate activations ("layers.3.attn_out", see each
// architecture file for the names) so tools can compare them with a reference layer by layer.
// The tensor is valid only during the call; the backend's stream is not synchronised.
using ActivationObserver =
    std::function<void(const std::string& name, const kernels::Tensor& activation)>;

class Model {
 public:
  virtual ~Model() = default;

  // The checkpoint's configuration: the whole model, whatever this rank holds.
  const ModelConfig& config() const { return config_; }
  // The shapes this rank holds: config() with num_heads, num_kv_heads and intermediate_size of
  // its tensor-parallel shard and num_layers = num_local_layers() (equal to config() when
  // tp_size == pp_size == 1; layer_types stays whole, indexed by the global layer). Size the KV
  // cache with it: KvCache::Allocate(backend, model.rank_config(), ...) and
  // KvCache::BytesPerBlock likewise.
  const ModelConfig& rank_config() const { return rank_config_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  int max_num_tokens() const { return max_num_tokens_; }
  // Positions Forward may be given: ModelLoadOptions::max_positions or max_position_embeddings.
  int64_t max_positions() const { return max_positions_; }

  // This pipeline stage: the global index of its first layer and how many layers it holds
  // ([0, config().num_layers) on a single stage).
  int first_layer() const { return first_layer_; }
  int num_local_layers() const { return num_local_layers_; }
  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == pp_size_ - 1; }
  int pp_rank() const { return pp_rank_; }
  int pp_size() const { return pp_size_; }

  // Runs this stage's layers over the step's tokens and writes their keys and values into `kv`
  // (one entry per local layer, index 0 = first_layer()). The last stage writes f32 logits
  // [L, vocab_size] for the rows in logits_indices; other stages write none (`logits` may be
  // empty). `hidden` is the residual stream [T, hidden_size] of the backend's compute dtype,
  // contiguous, required unless the stage is both first and last: a non-first stage reads its
  // input from it instead of embedding token_ids, a non-last stage writes its output into it
  // (the complete residual after its last layer). Input and output may share it.
  virtual absl::Status Forward(const ForwardInputs& inputs, std::span<const kernels::KvLayer> kv,
                               const kernels::Tensor& logits,
                               const kernels::Tensor* hidden = nullptr) = 0;

  // Empty (the default) costs nothing; architectures without observation points ignore it.
  void set_activation_observer(ActivationObserver observer) { observer_ = std::move(observer); }

 protected:
  // `rank_config` is RankConfig(config, ...) of tensor_parallel.h; the constructor narrows its
  // num_layers to this pipeline stage's.
  Model(ModelConfig config, ModelConfig rank_config, const ModelLoadOptions& options);

  // Checks shapes common to every architecture: T within the workspace, one KV entry per local
  // layer, logits on the last stage, `hidden` [T, H] of `compute_dtype` where the stage needs it.
  absl::Status CheckInputs(const ForwardInputs& inputs, std::span<const kernels::KvLayer> kv,
                           const kernels::Tensor& logits, const kernels::Tensor* hidden,
                           kernels::DType compute_dtype) const;

  // Reports `activation` as "layers.<layer>.<what>" (or "<what>" for layer < 0) to the observer;
  // `layer` is the global index.
  void Observe(int64_t layer, const char* what, const kernels::Tensor& activation) const;

 private:
  ModelConfig config_;
  ModelConfig rank_config_;
  int tp_rank_;
  int tp_size_;
  int max_num_tokens_;
  int64_t max_positions_;
  int pp_rank_;
  int pp_size_;
  int first_layer_;
  int num_local_layers_;
  ActivationObserver observer_;
};

// Reads config.json and the safetensors weights of `dir` and builds the model on `backend`.
// Errors name the file and tensor (missing, unexpected, wrong shape).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& dir, kernels::Backend& backend,
                                                 const ModelLoadOptions& options);

}  // namespace xserv::model
