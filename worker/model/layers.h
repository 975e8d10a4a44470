// Building blocks shared by the model files: per-layer weight structs, the scratch workspace, the
// attention and MLP sub-blocks. Each architecture file composes these; none of them holds state
// across steps except the workspace, which belongs to one model.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"
#include "kernels/backend.h"
#include "worker/model/model.h"
#include "worker/model/weight_loader.h"

namespace xserv::model {

using kernels::Backend;
using kernels::Buffer;
using kernels::Tensor;

// Allocates [rows, cols] of the backend's compute dtype, recording failure in `status`.
Buffer AllocRows(Backend& backend, int64_t rows, int64_t cols, absl::Status& status);

// The RoPE cos/sin table for the config (kernels/rope_table.h), f32 on the device.
absl::StatusOr<Buffer> LoadRopeTable(const ModelConfig& config, Backend& backend);

// Self-attention weights of one layer (HF names under `prefix` + "self_attn.").
struct AttentionWeights {
  Buffer q, k, v, o;                 // [heads*hd, H], [kv*hd, H], [kv*hd, H], [H, heads*hd]
  Buffer q_bias, k_bias, v_bias, o_bias;  // optional
  Buffer q_norm, k_norm;             // optional [hd] (Qwen3 QK-norm)
  Buffer sinks;                      // optional [heads] (gpt-oss), f32

  static AttentionWeights Load(WeightLoader& loader, const ModelConfig& config,
                               const std::string& prefix);
};

// Gated (SwiGLU) MLP weights: gate/up [I, H], down [H, I].
struct GatedMlpWeights {
  Buffer gate, up, down;
  static GatedMlpWeights Load(WeightLoader& loader, const ModelConfig& config,
                              const std::string& prefix);
};

// Scratch activations for up to max_tokens rows, allocated once at load.
struct Workspace {
  Buffer normed;     // [T, H]
  Buffer residual;   // [T, H]
  Buffer q, k, v;    // [T, heads*hd], [T, kv*hd], [T, kv*hd]
  Buffer attn;       // [T, heads*hd]
  Buffer block_out;  // [T, H]: attention or MLP output before the residual add
  Buffer gate, up;   // [T, I]
  Buffer gathered;   // [T, H]: rows selected for logits

  static absl::StatusOr<Workspace> Allocate(Backend& backend, const ModelConfig& config,
                                            int64_t max_tokens, int64_t mlp_width);
};

// q/k/v projections (+bias, QK-norm, RoPE), KV write and paged attention, then the output
// projection into ws.block_out. `normed` is the layer input [T, H].
absl::Status RunAttention(Backend& backend, const ModelConfig& config, const AttentionWeights& w,
                          const Tensor& normed, const Tensor* rope_table, int64_t layer,
                          const ForwardInputs& in, const kernels::KvLayer& kv, Workspace& ws,
                          int64_t tokens);

// down(silu(gate(x)) * up(x)) into ws.block_out.
absl::Status RunGatedMlp(Backend& backend, const GatedMlpWeights& w, const Tensor& normed,
                         Workspace& ws, int64_t tokens);

// Final norm output rows -> logits through lm_head [V, H].
absl::Status RunLmHead(Backend& backend, const Tensor& final_normed, const Tensor& lm_head,
                       const ForwardInputs& in, Workspace& ws, const Tensor& logits);

}  // namespace xserv::model
