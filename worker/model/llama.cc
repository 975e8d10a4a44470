// The Llama family of pre-norm decoders: Llama 2/3, Mistral, Qwen2 and Qwen3. They differ only in
// what ModelConfig already says: q/k/v biases (Qwen2), per-head QK-norm (Qwen3), RoPE scaling
// (Llama 3), sliding windows (Mistral), tied embeddings.
//
//   h = embed(ids)
//   per layer:  h += o(attn(rope(qknorm(q(n1(h)))), ...));  h += down(silu(gate(n2(h))) * up(n2(h)))
//   logits = lm_head(norm(h))
//
// Observation points (Model::Observe), named like the HF modules whose outputs they match:
// layers.i.input (h entering layer i), .attn_in (input_layernorm), .attn (attention before o_proj),
// .attn_out (o_proj), .mlp_in (post_attention_layernorm), .mlp_out (down_proj); final_norm.
#include "worker/model/architectures.h"

#include "common/status.h"
#include "worker/model/layers.h"

namespace xserv::model {
namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(const ModelConfig& config, const ModelLoadOptions& options)
      : Model(config, RankConfig(config, TpShard::FromOptions(options)), options),
        tp_(TpShard::FromOptions(options)) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    embed_ = loader.Take("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
    if (c.tie_word_embeddings) {
      loader.Ignore("lm_head.weight");  // some exporters write the tied copy anyway
    } else {
      lm_head_ = loader.Take("lm_head.weight", {c.vocab_size, c.hidden_size});
    }
    final_norm_ = loader.Take("model.norm.weight", {c.hidden_size});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i) + ".";
      Layer layer;
      layer.input_norm = loader.Take(prefix + "input_layernorm.weight", {c.hidden_size});
      layer.post_attention_norm =
          loader.Take(prefix + "post_attention_layernorm.weight", {c.hidden_size});
      layer.attention = AttentionWeights::Load(loader, c, tp_, prefix);
      layer.mlp = GatedMlpWeights::Load(loader, c, tp_, prefix);
      layers_.push_back(std::move(layer));
    }
    ASSIGN_OR_RETURN(rope_, LoadRopeTable(c, backend));
    const ModelConfig& rc = rank_config();
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, rc, max_num_tokens(), rc.intermediate_size));
    return absl::OkStatus();
  }

  absl::Status Forward(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                       const Tensor& logits) override {
    RETURN_IF_ERROR(CheckInputs(in, kv, logits));
    const ModelConfig& c = config();
    Backend& b = *backend_;
    const int64_t tokens = in.token_ids.dim(0);
    const float eps = static_cast<float>(c.norm_eps);
    const Tensor residual = ws_.residual.view().SliceRows(0, tokens);
    const Tensor normed = ws_.normed.view().SliceRows(0, tokens);
    const Tensor block_out = ws_.block_out.view().SliceRows(0, tokens);
    RETURN_IF_ERROR(b.Embedding(embed_.view(), in.token_ids, residual, /*accumulate=*/false));
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      if (i == 0) {
        RETURN_IF_ERROR(b.RmsNorm(residual, layer.input_norm.view(), eps, normed));
      } else {  // residual += previous MLP output, then normalise
        RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, layer.input_norm.view(), eps, normed));
      }
      const auto layer_index = static_cast<int64_t>(i);
      Observe(layer_index, "input", residual);
      Observe(layer_index, "attn_in", normed);
      RETURN_IF_ERROR(RunAttention(b, rank_config(), layer.attention, normed, &rope_.view(),
                                   layer_index, in, kv[i], ws_, tokens));
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      Observe(layer_index, "attn", ws_.attn.view().SliceRows(0, tokens));  // this rank's heads
      Observe(layer_index, "attn_out", block_out);
      RETURN_IF_ERROR(
          b.AddRmsNorm(block_out, residual, layer.post_attention_norm.view(), eps, normed));
      Observe(layer_index, "mlp_in", normed);
      RETURN_IF_ERROR(RunGatedMlp(b, layer.mlp, normed, ws_, tokens));
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      Observe(layer_index, "mlp_out", block_out);
    }
    RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, final_norm_.view(), eps, normed));
    Observe(-1, "final_norm", normed);
    // Known gap: lm_head is replicated (every rank computes the full logits), not vocab-parallel.
    const Tensor& lm_head = c.tie_word_embeddings ? embed_.view() : lm_head_.view();
    return RunLmHead(b, normed, lm_head, in, ws_, logits);
  }

 private:
  struct Layer {
    Buffer input_norm, post_attention_norm;  // [H]
    AttentionWeights attention;
    GatedMlpWeights mlp;
  };

  TpShard tp_;
  Backend* backend_ = nullptr;
  Buffer embed_;       // [V, H]
  Buffer lm_head_;     // [V, H], empty when tied
  Buffer final_norm_;  // [H]
  Buffer rope_;        // f32 [max_positions, head_dim]
  std::vector<Layer> layers_;
  Workspace ws_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadLlamaFamily(const ModelConfig& config,
                                                       WeightLoader& loader, Backend& backend,
                                                       const ModelLoadOptions& options) {
  auto model = std::make_unique<LlamaModel>(config, options);
  RETURN_IF_ERROR(model->Load(loader, backend));
  return model;
}

}  // namespace xserv::model
