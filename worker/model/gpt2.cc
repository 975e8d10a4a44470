// GPT-2: learned absolute positions, pre-LayerNorm blocks with biases, fused QKV, GELU (tanh), tied
// lm_head. Checkpoint Linear layers are Conv1D ([in, out]); they are transposed once at load to
// the [out, in] layout every other model uses.
//
//   h = wte[ids] + wpe[pos]
//   per layer:  h += c_proj(attn(split(c_attn(ln_1(h)))));  h += mlp.c_proj(gelu(c_fc(ln_2(h))))
//   logits = wte · ln_f(h)
#include <cmath>

#include "common/status.h"
#include "worker/model/architectures.h"
#include "worker/model/layers.h"

namespace xserv::model {
namespace {

class Gpt2Model final : public Model {
 public:
  Gpt2Model(ModelConfig config, int max_tokens) : Model(std::move(config), max_tokens) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    const int64_t h = c.hidden_size, inner = c.intermediate_size;
    // HF's GPT2LMHeadModel saves under "transformer."; the original checkpoint has no prefix.
    const std::string p = loader.Has("transformer.wte.weight") ? "transformer." : "";
    wte_ = loader.Take(p + "wte.weight", {c.vocab_size, h});
    wpe_ = loader.Take(p + "wpe.weight", {c.max_position_embeddings, h});
    ln_f_weight_ = loader.Take(p + "ln_f.weight", {h});
    ln_f_bias_ = loader.Take(p + "ln_f.bias", {h});
    loader.Ignore("lm_head.weight");  // tied to wte when present
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string l = p + "h." + std::to_string(i) + ".";
      Layer layer;
      layer.ln_1_weight = loader.Take(l + "ln_1.weight", {h});
      layer.ln_1_bias = loader.Take(l + "ln_1.bias", {h});
      layer.c_attn = loader.TakeTransposed(l + "attn.c_attn.weight", 3 * h, h);
      layer.c_attn_bias = loader.Take(l + "attn.c_attn.bias", {3 * h});
      layer.attn_proj = loader.TakeTransposed(l + "attn.c_proj.weight", h, h);
      layer.attn_proj_bias = loader.Take(l + "attn.c_proj.bias", {h});
      layer.ln_2_weight = loader.Take(l + "ln_2.weight", {h});
      layer.ln_2_bias = loader.Take(l + "ln_2.bias", {h});
      layer.c_fc = loader.TakeTransposed(l + "mlp.c_fc.weight", inner, h);
      layer.c_fc_bias = loader.Take(l + "mlp.c_fc.bias", {inner});
      layer.mlp_proj = loader.TakeTransposed(l + "mlp.c_proj.weight", h, inner);
      layer.mlp_proj_bias = loader.Take(l + "mlp.c_proj.bias", {h});
      // Causal-mask buffers some exporters persist; the mask is implicit here.
      loader.Ignore(l + "attn.bias");
      loader.Ignore(l + "attn.masked_bias");
      layers_.push_back(std::move(layer));
    }
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, c, max_num_tokens(), inner));
    absl::Status status;
    qkv_ = AllocRows(backend, max_num_tokens(), 3 * h, status);
    return status;
  }

  absl::Status Forward(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                       const Tensor& logits) override {
    RETURN_IF_ERROR(CheckInputs(in, kv, logits));
    const ModelConfig& c = config();
    Backend& b = *backend_;
    const int64_t tokens = in.token_ids.dim(0), h = c.hidden_size;
    const float eps = static_cast<float>(c.norm_eps);
    const Tensor residual = ws_.residual.view().SliceRows(0, tokens);
    const Tensor normed = ws_.normed.view().SliceRows(0, tokens);
    const Tensor block_out = ws_.block_out.view().SliceRows(0, tokens);
    const Tensor qkv = qkv_.view().SliceRows(0, tokens);
    const Tensor attn = ws_.attn.view().SliceRows(0, tokens);
    const Tensor fc = ws_.gate.view().SliceRows(0, tokens);
    RETURN_IF_ERROR(b.Embedding(wte_.view(), in.token_ids, residual, /*accumulate=*/false));
    RETURN_IF_ERROR(b.Embedding(wpe_.view(), in.positions, residual, /*accumulate=*/true));
    kernels::AttentionParams params;
    params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      RETURN_IF_ERROR(
          b.LayerNorm(residual, layer.ln_1_weight.view(), layer.ln_1_bias.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.c_attn.view(), &layer.c_attn_bias.view(), qkv));
      const Tensor q = qkv.SliceLast(0, h).UnflattenLast(c.num_heads, c.head_dim);
      const Tensor k = qkv.SliceLast(h, 2 * h).UnflattenLast(c.num_heads, c.head_dim);
      const Tensor v = qkv.SliceLast(2 * h, 3 * h).UnflattenLast(c.num_heads, c.head_dim);
      RETURN_IF_ERROR(b.WriteKv(k, v, kv[i], in.attention.slot_mapping));
      RETURN_IF_ERROR(b.Attention(q, kv[i], in.attention, params,
                                  attn.UnflattenLast(c.num_heads, c.head_dim)));
      RETURN_IF_ERROR(b.Matmul(attn, layer.attn_proj.view(), &layer.attn_proj_bias.view(),
                               block_out));
      RETURN_IF_ERROR(b.Add(residual, block_out, residual));
      RETURN_IF_ERROR(
          b.LayerNorm(residual, layer.ln_2_weight.view(), layer.ln_2_bias.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.c_fc.view(), &layer.c_fc_bias.view(), fc));
      RETURN_IF_ERROR(b.GeluTanh(fc, fc));
      RETURN_IF_ERROR(b.Matmul(fc, layer.mlp_proj.view(), &layer.mlp_proj_bias.view(), block_out));
      RETURN_IF_ERROR(b.Add(residual, block_out, residual));
    }
    RETURN_IF_ERROR(b.LayerNorm(residual, ln_f_weight_.view(), ln_f_bias_.view(), eps, normed));
    return RunLmHead(b, normed, wte_.view(), in, ws_, logits);
  }

 private:
  struct Layer {
    Buffer ln_1_weight, ln_1_bias, ln_2_weight, ln_2_bias;  // [H]
    Buffer c_attn, c_attn_bias;                             // [3H, H], [3H]
    Buffer attn_proj, attn_proj_bias;                       // [H, H], [H]
    Buffer c_fc, c_fc_bias;                                 // [I, H], [I]
    Buffer mlp_proj, mlp_proj_bias;                         // [H, I], [H]
  };

  Backend* backend_ = nullptr;
  Buffer wte_, wpe_;                 // [V, H], [P, H]
  Buffer ln_f_weight_, ln_f_bias_;   // [H]
  Buffer qkv_;                       // [T, 3H] scratch
  std::vector<Layer> layers_;
  Workspace ws_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadGpt2(const ModelConfig& config, WeightLoader& loader,
                                                Backend& backend,
                                                const ModelLoadOptions& options) {
  if (config.num_heads * config.head_dim != config.hidden_size) {
    return absl::InvalidArgumentError("gpt2: n_embd must equal n_head * head_dim");
  }
  auto model = std::make_unique<Gpt2Model>(config, options.max_num_tokens);
  RETURN_IF_ERROR(model->Load(loader, backend));
  return model;
}

}  // namespace xserv::model
