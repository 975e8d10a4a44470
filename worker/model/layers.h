// Building blocks shared by the model files: per-layer weight structs, the scratch workspace, the
// attention and MLP sub-blocks. Each architecture file composes these; none of them holds state
// across steps except the workspace, which belongs to one model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"
#include "kernels/backend.h"
#include "worker/model/model.h"
#include "worker/model/tensor_parallel.h"
#include "worker/model/weight_loader.h"

namespace xserv::model {

using kernels::Backend;
using kernels::Buffer;
using kernels::Tensor;

// An optional weight (bias) as the op API takes it: null when absent.
inline const Tensor* OrNull(const Buffer& b) { return b.empty() ? nullptr : &b.view(); }
template <typename T>
const T* OrNull(const std::optional<T>& v) {
  return v.has_value() ? &*v : nullptr;
}

// Allocates [rows, cols] of the backend's compute dtype, recording failure in `status`.
Buffer AllocRows(Backend& backend, int64_t rows, int64_t cols, absl::Status& status);

// The RoPE cos/sin table for the config's first `positions` positions (kernels/rope_table.h),
// f32 on the device. InvalidArgument, naming --max-model-len, when it would pass 4 GiB.
absl::StatusOr<Buffer> LoadRopeTable(const ModelConfig& config, int64_t positions,
                                     Backend& backend);

// Sums `t` in place over the tensor-parallel group: the partial outputs of a row-parallel layer.
// A no-op without a communicator (tp_size 1). For now only the CPU backend's contiguous f32 host
// tensors (InvalidArgument otherwise); the CUDA backend will route this one call to NCCL.
absl::Status AllReduceSum(parallel::Communicator* comm, Backend& backend, const Tensor& t);

// The whole tensor when `tp` is not sharded (the plain Take), else its `slice`.
Buffer TakeShard(WeightLoader& loader, const TpShard& tp, const std::string& name,
                 const std::vector<int64_t>& shape, const TensorSlice& slice);
// The bias of a row-parallel layer: on rank 0 only (empty elsewhere), so that it enters the
// all-reduced sum once.
Buffer TakeRowParallelBias(WeightLoader& loader, const TpShard& tp, const std::string& name,
                           int64_t size);

// Self-attention weights of one layer (HF names under `prefix` + "self_attn."); heads and kv are
// this rank's (RankConfig), H the full hidden size.
// A linear layer's weight [N, K]: in the compute dtype, or FP8 codes with block scales that
// Backend::MatmulFp8 multiplies directly (WeightLoader::set_fp8_matmuls).
struct LinearWeight {
  Buffer dense;
  Buffer codes, scales;  // instead of dense: u8 [N, K], f32 [ceil(N / block), ceil(K / block)]
  int64_t block = 0;
  Buffer row_scales;  // Fp8Weight::row_scales, where the backend wants them

  bool empty() const { return dense.empty() && codes.empty(); }
  int64_t rows() const { return (dense.empty() ? codes : dense).view().dim(0); }
  // The FP8 form's views (codes non-empty).
  kernels::Fp8Weight fp8() const {
    return {.codes = codes.view(),
            .scales = scales.view(),
            .block = block,
            .row_scales = row_scales.empty() ? kernels::Tensor{} : row_scales.view()};
  }
};

// out = x · w^T (+ bias) through Matmul or MatmulFp8.
absl::Status RunLinear(Backend& backend, const Tensor& x, const LinearWeight& w, const Tensor* bias,
                       const Tensor& out);

// RunLinear, or with `norm` the block's pre-norm and then the projection as one op
// (Backend::AddRmsNormMatmul; x is then norm->normed, which the op writes).
absl::Status RunNormLinear(Backend& backend, const kernels::PreNorm* norm, const Tensor& x,
                           const LinearWeight& w, const Tensor* bias, const Tensor& out);

// The linear weight `name` of `shape` (this rank's `slice` of it under TP): FP8 when the loader
// keeps it so (WeightLoader::TakeFp8), else dense like TakeShard.
LinearWeight TakeLinear(WeightLoader& loader, Backend& backend, const TpShard& tp,
                        const std::string& name, const std::vector<int64_t>& shape,
                        const TensorSlice& slice);

struct AttentionWeights {
  LinearWeight q, k, v, o;           // [heads*hd, H], [kv*hd, H], [kv*hd, H], [H, heads*hd]
  Buffer q_bias, k_bias, v_bias;     // optional [heads*hd], [kv*hd], [kv*hd]
  // q, k and v stacked into one projection [(heads + 2 kv) * hd, H] (and its bias) where the
  // backend takes the slices of its output as cheaply (Backend::TakesStridedQkNormRope); q, k, v
  // and their biases are then empty. Dense weights only (FP8 ones stay apart).
  LinearWeight qkv;
  Buffer qkv_bias;
  Buffer o_bias;                     // optional [H]; rank 0 only
  Buffer q_norm, k_norm;             // optional [hd] (Qwen3 QK-norm), replicated
  Buffer sinks;                      // optional [heads] (gpt-oss), f32

  // The first projection a step runs: qkv, or q where they stay apart.
  const LinearWeight& first() const { return qkv.empty() ? q : qkv; }

  // `config` is the checkpoint's (full shapes), `tp` selects this rank's heads.
  static AttentionWeights Load(WeightLoader& loader, Backend& backend, const ModelConfig& config,
                               const TpShard& tp, const std::string& prefix);
};

// Gated (SwiGLU) MLP weights: gate and up [I, H] each (column-parallel) stacked into one
// gate_up [2I, H] (one GEMM reads both: one launch, and a wide one, per decode step), down [H, I]
// (row-parallel); I this rank's share of intermediate_size.
struct GatedMlpWeights {
  LinearWeight gate_up, down;
  // FP8 down transposed ([I, H]), where the backend wants it (Backend::WantsFp8DownTransposed):
  // one-row steps then run the whole MLP as Backend::GatedMlpRowFp8.
  LinearWeight down_t;
  // Failures (a missing tensor, no memory for the stacked copy) land in `status`.
  static GatedMlpWeights Load(WeightLoader& loader, Backend& backend, const ModelConfig& config,
                              const TpShard& tp, const std::string& prefix, absl::Status& status);
};

// Scratch activations for up to max_tokens rows, allocated once at load; `config` is this rank's
// (RankConfig), so heads and kv are per rank.
struct Workspace {
  Buffer normed;     // [T, H]
  Buffer residual;   // [T, H]
  // [T, H]: where the residual stream's next sum goes when the backend fuses each block's
  // pre-norm into its first projection (Backend::FusesNormIntoMatmul; empty otherwise): the
  // stream then alternates between the two.
  Buffer residual_spare;
  Buffer qkv;        // [T, heads*hd + 2 kv*hd]: q, k, v (Qkv)
  Buffer attn;       // [T, heads*hd]
  Buffer block_out;  // [T, H]: attention or MLP output before the residual add
  Buffer gate_up;    // [T, 2I]: the gated MLP's stacked projection
  Buffer gathered;   // [T, H]: rows selected for logits

  // A contiguous [tokens, width] view of gate_up's storage (width <= 2I), for MLPs without a
  // gate (GPT-2's fc output).
  Tensor MlpRows(int64_t tokens, int64_t width) const;

  // q [tokens, q_dim], k and v [tokens, kv_dim] in qkv's storage: column slices of one
  // [tokens, q_dim + 2 kv_dim] matrix (`all`) when `stacked`, else three packed matrices one
  // after the other (`all` empty).
  struct QkvViews {
    Tensor all, q, k, v;
  };
  QkvViews Qkv(int64_t tokens, int64_t q_dim, int64_t kv_dim, bool stacked) const;

  // `residual_spare`: allocate it when the backend fuses the pre-norms (models that use it).
  static absl::StatusOr<Workspace> Allocate(Backend& backend, const ModelConfig& config,
                                            int64_t max_tokens, int64_t mlp_width,
                                            bool residual_spare = false);
};

// q/k/v projections (+bias, QK-norm, RoPE), KV write and paged attention, then the output
// projection into ws.block_out. `normed` is the layer input [T, H]; `config` is this rank's
// (RankConfig). Under tensor parallelism block_out holds this rank's partial sum: the caller
// all-reduces it. With `norm`, normed is its output, computed with the first projection
// (RunNormLinear). `after_o`, if given, is the weight of the matmul that follows the output
// projection (the MLP's first): the backend may start reading it early
// (Backend::PrefetchAfterNextMatmul), as each projection here does for the next.
absl::Status RunAttention(Backend& backend, const ModelConfig& config, const AttentionWeights& w,
                          const Tensor& normed, const Tensor* rope_table, int64_t layer,
                          const ForwardInputs& in, const kernels::KvLayer& kv, Workspace& ws,
                          int64_t tokens, const kernels::PreNorm* norm = nullptr,
                          const LinearWeight* after_o = nullptr);

// down(silu(gate(x)) * up(x)) into ws.block_out (a partial sum under tensor parallelism);
// `norm` as RunAttention's; `after_down` the weight of the matmul after down (the next layer's
// first projection), as RunAttention's after_o.
absl::Status RunGatedMlp(Backend& backend, const GatedMlpWeights& w, const Tensor& normed,
                         Workspace& ws, int64_t tokens, const kernels::PreNorm* norm = nullptr,
                         const LinearWeight* after_down = nullptr);

// Vocab-parallel lm_head: with tensor parallelism and a vocabulary that splits evenly, each rank
// holds vocab rows [begin, end) of the lm_head and computes those logit columns; the full rows
// are then summed across ranks (every other column zero), so each rank still ends with the whole
// logits. Otherwise (one rank, uneven vocabulary) the lm_head is whole: begin 0, end V.
struct VocabShard {
  int64_t begin = 0, end = 0;
  static VocabShard Of(const ModelConfig& config, const TpShard& tp);
  bool Covers(int64_t vocab) const { return begin == 0 && end == vocab; }
};
// The lm_head rows of `shard` from the checkpoint tensor `name` [V, H]: FP8 when the loader
// keeps it so (ModelLoadOptions::fp8_lm_head with fp8_matmuls), else dense.
LinearWeight TakeLmHead(WeightLoader& loader, Backend& backend, const VocabShard& shard,
                        const std::string& name, const ModelConfig& config);

// Final norm output rows -> logits [L, V] through `lm_head`, this rank's rows [shard) of [V, H]
// (all of them when the shard covers the vocabulary; else summed across `comm`).
absl::Status RunLmHead(Backend& backend, const Tensor& final_normed, const LinearWeight& lm_head,
                       const VocabShard& shard, parallel::Communicator* comm,
                       const ForwardInputs& in, Workspace& ws, const Tensor& logits);
// The same with a tied lm_head: the embedding rows of the shard.
absl::Status RunLmHead(Backend& backend, const Tensor& final_normed, const Tensor& lm_head,
                       const VocabShard& shard, parallel::Communicator* comm,
                       const ForwardInputs& in, Workspace& ws, const Tensor& logits);

// The input embedding table. Under TP with a vocabulary the ranks split evenly (VocabShard), it
// is vocab-parallel (Megatron's VocabParallelEmbedding): each rank holds rows [shard.begin,
// shard.end), a token outside the shard gives a zero row (Backend::EmbeddingShard, on the device
// so that decode graphs hold it), and the sum over the ranks gives every token its row (exact:
// one non-zero term per element).
class EmbeddingTable {
 public:
  // `shard` covering the vocabulary loads the whole table (no all-reduce in Run). Failures are
  // recorded by the loader (the table is then empty).
  static EmbeddingTable Load(WeightLoader& loader, const TpShard& tp, const VocabShard& shard,
                             const std::string& name, const ModelConfig& config);

  // out[t] = row of token t ([T, H], T = in.token_ids.dim(0)); sums over `comm` when sharded.
  absl::Status Run(Backend& backend, parallel::Communicator* comm, const ForwardInputs& in,
                   const Tensor& out);
  // The shard's rows [shard.end - shard.begin, H]: a tied lm_head.
  Tensor rows() const { return table_.view(); }
  bool empty() const { return table_.empty(); }

 private:
  Buffer table_;  // [shard.end - shard.begin, H]
  VocabShard shard_;
  bool sharded_ = false;
};

}  // namespace xserv::model
