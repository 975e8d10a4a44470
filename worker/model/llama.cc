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
//
// Under pipeline parallelism a stage runs layers [first_layer, +num_local_layers): h comes from
// the previous stage instead of embed(ids), and a non-last stage hands h on instead of logits.
#include "worker/model/architectures.h"

#include "common/status.h"
#include "worker/model/layers.h"
#include "worker/model/pipeline_parallel.h"

namespace xserv::model {
namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(const ModelConfig& config, const ModelLoadOptions& options)
      : Model(config, RankConfig(config, TpShard::FromOptions(options)), options),
        tp_(TpShard::FromOptions(options)),
        pp_(PpStage::FromOptions(options, config.num_layers)) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    const std::string embed = "model.embed_tokens.weight";
    if (is_first_stage() || (is_last_stage() && c.tie_word_embeddings)) {
      embed_ = EmbeddingTable::Load(loader, tp_, VocabShard::Of(c, tp_), embed, c);
    } else {
      loader.Ignore(embed);
    }
    if (c.tie_word_embeddings || !is_last_stage()) {
      loader.Ignore("lm_head.weight");  // tied exporters may write the copy anyway
    } else {
      lm_head_ = TakeLmHead(loader, backend, VocabShard::Of(c, tp_), "lm_head.weight", c);
    }
    if (is_last_stage()) {
      final_norm_ = loader.Take("model.norm.weight", {c.hidden_size});
    } else {
      loader.Ignore("model.norm.weight");
    }
    IgnoreOtherStagesLayers(loader, pp_, c.num_layers, "model.layers.");
    for (int64_t i = pp_.first_layer; i < pp_.first_layer + pp_.num_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i) + ".";
      Layer layer;
      layer.input_norm = loader.Take(prefix + "input_layernorm.weight", {c.hidden_size});
      layer.post_attention_norm =
          loader.Take(prefix + "post_attention_layernorm.weight", {c.hidden_size});
      layer.attention = AttentionWeights::Load(loader, backend, c, tp_, prefix);
      absl::Status stacked;
      layer.mlp = GatedMlpWeights::Load(loader, backend, c, tp_, prefix, stacked);
      RETURN_IF_ERROR(stacked);
      layers_.push_back(std::move(layer));
    }
    ASSIGN_OR_RETURN(rope_, LoadRopeTable(c, max_positions(), backend));
    const ModelConfig& rc = rank_config();
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, rc, max_num_tokens(), rc.intermediate_size,
                                              /*residual_spare=*/true));
    return absl::OkStatus();
  }

  absl::Status Forward(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                       const Tensor& logits, const Tensor* hidden) override {
    Backend& b = *backend_;
    RETURN_IF_ERROR(CheckInputs(in, kv, logits, hidden, b.compute_dtype()));
    const ModelConfig& c = config();
    const int64_t tokens = in.token_ids.dim(0);
    const float eps = static_cast<float>(c.norm_eps);
    Tensor residual = ws_.residual.view().SliceRows(0, tokens);
    // With the pre-norms fused into the projections, each sum lands in the other buffer.
    const bool fuse_norms = b.FusesNormIntoMatmul();
    Tensor spare = fuse_norms ? ws_.residual_spare.view().SliceRows(0, tokens) : Tensor{};
    const Tensor normed = ws_.normed.view().SliceRows(0, tokens);
    const Tensor block_out = ws_.block_out.view().SliceRows(0, tokens);
    if (is_first_stage()) {
      RETURN_IF_ERROR(embed_.Run(b, tp_.comm, in, residual));
    } else {  // a same-dtype Convert is a device copy on every backend
      RETURN_IF_ERROR(b.Convert(*hidden, residual));
    }
    // residual += block_out, then normed = the norm of it: one op here, or with the block's
    // first projection (returned, for RunAttention / RunGatedMlp to run).
    using MaybeNorm = std::optional<kernels::PreNorm>;
    const auto pre_norm = [&](const Buffer& weight) -> absl::StatusOr<MaybeNorm> {
      if (!fuse_norms) {
        RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, weight.view(), eps, normed));
        return std::nullopt;
      }
      const kernels::PreNorm norm{.x = block_out,
                                  .residual = residual,
                                  .residual_out = spare,
                                  .weight = weight.view(),
                                  .eps = eps,
                                  .normed = normed};
      std::swap(residual, spare);
      return norm;
    };
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      MaybeNorm norm;
      if (i == 0) {  // the stage's input is a complete residual: nothing pending to add
        RETURN_IF_ERROR(b.RmsNorm(residual, layer.input_norm.view(), eps, normed));
      } else {  // residual += previous MLP output, then normalise
        ASSIGN_OR_RETURN(norm, pre_norm(layer.input_norm));
      }
      // Global index: sliding windows and observer names are per checkpoint layer.
      const int64_t layer_index = pp_.first_layer + static_cast<int64_t>(i);
      RETURN_IF_ERROR(RunAttention(b, rank_config(), layer.attention, normed, &rope_.view(),
                                   layer_index, in, kv[i], ws_, tokens, OrNull(norm),
                                   &layer.mlp.gate_up));
      Observe(layer_index, "input", residual);
      Observe(layer_index, "attn_in", normed);
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      Observe(layer_index, "attn", ws_.attn.view().SliceRows(0, tokens));  // this rank's heads
      Observe(layer_index, "attn_out", block_out);
      ASSIGN_OR_RETURN(norm, pre_norm(layer.post_attention_norm));
      const LinearWeight* next_layer =
          i + 1 < layers_.size() ? &layers_[i + 1].attention.first() : nullptr;
      RETURN_IF_ERROR(RunGatedMlp(b, layer.mlp, normed, ws_, tokens, OrNull(norm), next_layer));
      Observe(layer_index, "mlp_in", normed);
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      Observe(layer_index, "mlp_out", block_out);
    }
    // The last MLP output is still pending: the next stage gets residual + block_out.
    if (!is_last_stage()) return b.Add(residual, block_out, *hidden);
    RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, final_norm_.view(), eps, normed));
    Observe(-1, "final_norm", normed);
    // Vocab-parallel under TP (layers.h VocabShard); a tied head is a row slice of the table.
    const VocabShard shard = VocabShard::Of(c, tp_);
    if (c.tie_word_embeddings) {
      return RunLmHead(b, normed, embed_.rows(), shard, tp_.comm, in, ws_, logits);
    }
    return RunLmHead(b, normed, lm_head_, shard, tp_.comm, in, ws_, logits);
  }

 private:
  struct Layer {
    Buffer input_norm, post_attention_norm;  // [H]
    AttentionWeights attention;
    GatedMlpWeights mlp;
  };

  TpShard tp_;
  PpStage pp_;
  Backend* backend_ = nullptr;
  EmbeddingTable embed_;  // first stage, and last when tied (its rows are the lm_head then)
  LinearWeight lm_head_;  // [V / tp, H] (VocabShard); last stage, empty when tied
  Buffer final_norm_;  // [H]; last stage
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
