// GPT-2: learned absolute positions, pre-LayerNorm blocks with biases, fused QKV, GELU (tanh), tied
// lm_head. Checkpoint Linear layers are Conv1D ([in, out]); they are transposed once at load to
// the [out, in] layout every other model uses. Under tensor parallelism c_attn and c_fc are
// column-parallel (c_attn's q, k and v column blocks of this rank's heads, concatenated), the
// c_proj's row-parallel (bias on rank 0, outputs all-reduced); see tensor_parallel.h.
//
//   h = wte[ids] + wpe[pos]
//   per layer:  h += c_proj(attn(split(c_attn(ln_1(h)))));  h += mlp.c_proj(gelu(c_fc(ln_2(h))))
//   logits = wte · ln_f(h)
//
// Under pipeline parallelism the first stage embeds (wte, wpe), the last holds ln_f and wte again
// for the tied lm_head; between stages h is complete after every layer, so it is handed on as is.
#include <cmath>

#include "common/status.h"
#include "worker/model/architectures.h"
#include "worker/model/layers.h"
#include "worker/model/pipeline_parallel.h"

namespace xserv::model {
namespace {

// A Conv1D weight as [rows, cols] = [out, in]: whole on one rank, `slice` of that layout when
// sharded.
Buffer TakeConv1D(WeightLoader& loader, const TpShard& tp, const std::string& name, int64_t rows,
                  int64_t cols, const TensorSlice& slice) {
  if (!tp.sharded()) return loader.TakeTransposed(name, rows, cols);
  return loader.TakeTransposed(name, rows, cols, slice);
}

class Gpt2Model final : public Model {
 public:
  Gpt2Model(const ModelConfig& config, const ModelLoadOptions& options)
      : Model(config, RankConfig(config, TpShard::FromOptions(options)), options),
        tp_(TpShard::FromOptions(options)),
        pp_(PpStage::FromOptions(options, config.num_layers)) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    const int64_t h = c.hidden_size, inner = c.intermediate_size;
    // This rank's heads [h_begin, h_end) as features of each of c_attn's q, k and v blocks.
    const int64_t h_begin = tp_.rank * h / tp_.size, h_end = (tp_.rank + 1) * h / tp_.size;
    const TensorSlice qkv_rows{.dim = 0,
                               .ranges = {{h_begin, h_end},
                                          {h + h_begin, h + h_end},
                                          {2 * h + h_begin, 2 * h + h_end}}};
    // HF's GPT2LMHeadModel saves under "transformer."; the original checkpoint has no prefix.
    const std::string p = loader.Has("transformer.wte.weight") ? "transformer." : "";
    if (pp_.first() || pp_.last()) {  // the last stage's lm_head is tied to wte
      wte_ = loader.Take(p + "wte.weight", {c.vocab_size, h});
    } else {
      loader.Ignore(p + "wte.weight");
    }
    if (pp_.first()) {
      wpe_ = loader.Take(p + "wpe.weight", {c.max_position_embeddings, h});
    } else {
      loader.Ignore(p + "wpe.weight");
    }
    if (pp_.last()) {
      ln_f_weight_ = loader.Take(p + "ln_f.weight", {h});
      ln_f_bias_ = loader.Take(p + "ln_f.bias", {h});
    } else {
      loader.Ignore(p + "ln_f.weight");
      loader.Ignore(p + "ln_f.bias");
    }
    loader.Ignore("lm_head.weight");  // tied to wte when present
    IgnoreOtherStagesLayers(loader, pp_, c.num_layers, p + "h.");
    for (int64_t i = pp_.first_layer; i < pp_.first_layer + pp_.num_layers; ++i) {
      const std::string l = p + "h." + std::to_string(i) + ".";
      Layer layer;
      layer.ln_1_weight = loader.Take(l + "ln_1.weight", {h});
      layer.ln_1_bias = loader.Take(l + "ln_1.bias", {h});
      layer.c_attn = TakeConv1D(loader, tp_, l + "attn.c_attn.weight", 3 * h, h, qkv_rows);
      layer.c_attn_bias = TakeShard(loader, tp_, l + "attn.c_attn.bias", {3 * h}, qkv_rows);
      layer.attn_proj = TakeConv1D(loader, tp_, l + "attn.c_proj.weight", h, h, tp_.Split(1, h));
      layer.attn_proj_bias = TakeRowParallelBias(loader, tp_, l + "attn.c_proj.bias", h);
      layer.ln_2_weight = loader.Take(l + "ln_2.weight", {h});
      layer.ln_2_bias = loader.Take(l + "ln_2.bias", {h});
      layer.c_fc = TakeConv1D(loader, tp_, l + "mlp.c_fc.weight", inner, h, tp_.Split(0, inner));
      layer.c_fc_bias = TakeShard(loader, tp_, l + "mlp.c_fc.bias", {inner}, tp_.Split(0, inner));
      layer.mlp_proj =
          TakeConv1D(loader, tp_, l + "mlp.c_proj.weight", h, inner, tp_.Split(1, inner));
      layer.mlp_proj_bias = TakeRowParallelBias(loader, tp_, l + "mlp.c_proj.bias", h);
      // Causal-mask buffers some exporters persist; the mask is implicit here.
      loader.Ignore(l + "attn.bias");
      loader.Ignore(l + "attn.masked_bias");
      layers_.push_back(std::move(layer));
    }
    const ModelConfig& rc = rank_config();
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, rc, max_num_tokens(), rc.intermediate_size));
    absl::Status status;
    qkv_ = AllocRows(backend, max_num_tokens(), 3 * rc.num_heads * rc.head_dim, status);
    return status;
  }

  absl::Status Forward(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                       const Tensor& logits, const Tensor* hidden) override {
    Backend& b = *backend_;
    RETURN_IF_ERROR(CheckInputs(in, kv, logits, hidden, b.compute_dtype()));
    const ModelConfig& c = rank_config();
    const int64_t tokens = in.token_ids.dim(0), hr = c.num_heads * c.head_dim;  // Hr
    const float eps = static_cast<float>(c.norm_eps);
    const Tensor residual = ws_.residual.view().SliceRows(0, tokens);
    const Tensor normed = ws_.normed.view().SliceRows(0, tokens);
    const Tensor block_out = ws_.block_out.view().SliceRows(0, tokens);
    const Tensor qkv = qkv_.view().SliceRows(0, tokens);
    const Tensor attn = ws_.attn.view().SliceRows(0, tokens);
    const Tensor fc = ws_.MlpRows(tokens, c.intermediate_size);
    if (pp_.first()) {
      RETURN_IF_ERROR(b.Embedding(wte_.view(), in.token_ids, residual, /*accumulate=*/false));
      RETURN_IF_ERROR(b.Embedding(wpe_.view(), in.positions, residual, /*accumulate=*/true));
    } else {  // a same-dtype Convert is a device copy on every backend
      RETURN_IF_ERROR(b.Convert(*hidden, residual));
    }
    kernels::AttentionParams params;
    params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      RETURN_IF_ERROR(
          b.LayerNorm(residual, layer.ln_1_weight.view(), layer.ln_1_bias.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.c_attn.view(), &layer.c_attn_bias.view(), qkv));
      const Tensor q = qkv.SliceLast(0, hr).UnflattenLast(c.num_heads, c.head_dim);
      const Tensor k = qkv.SliceLast(hr, 2 * hr).UnflattenLast(c.num_heads, c.head_dim);
      const Tensor v = qkv.SliceLast(2 * hr, 3 * hr).UnflattenLast(c.num_heads, c.head_dim);
      RETURN_IF_ERROR(b.WriteKv(k, v, kv[i], in.attention.slot_mapping));
      RETURN_IF_ERROR(b.Attention(q, kv[i], in.attention, params,
                                  attn.UnflattenLast(c.num_heads, c.head_dim)));
      RETURN_IF_ERROR(b.Matmul(attn, layer.attn_proj.view(), OrNull(layer.attn_proj_bias),
                               block_out));
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      RETURN_IF_ERROR(b.Add(residual, block_out, residual));
      RETURN_IF_ERROR(
          b.LayerNorm(residual, layer.ln_2_weight.view(), layer.ln_2_bias.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.c_fc.view(), &layer.c_fc_bias.view(), fc));
      RETURN_IF_ERROR(b.GeluTanh(fc, fc));
      RETURN_IF_ERROR(b.Matmul(fc, layer.mlp_proj.view(), OrNull(layer.mlp_proj_bias), block_out));
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      RETURN_IF_ERROR(b.Add(residual, block_out, residual));
    }
    if (!pp_.last()) return b.Convert(residual, *hidden);
    RETURN_IF_ERROR(b.LayerNorm(residual, ln_f_weight_.view(), ln_f_bias_.view(), eps, normed));
    // The tied head: this rank's rows of wte under TP when the vocabulary splits evenly (GPT-2's
    // 50,257 is odd, so with tp = 2, 4 or 8 every rank uses the whole table).
    const VocabShard shard = VocabShard::Of(config(), tp_);
    return RunLmHead(b, normed, wte_.view().SliceRows(shard.begin, shard.end), shard, tp_.comm, in,
                     ws_, logits);
  }

 private:
  struct Layer {
    Buffer ln_1_weight, ln_1_bias, ln_2_weight, ln_2_bias;  // [H]
    // Hr = H / tp, Ir = I / tp: this rank's share of the heads' features and of the MLP.
    Buffer c_attn, c_attn_bias;                             // [3Hr, H], [3Hr]
    Buffer attn_proj, attn_proj_bias;                       // [H, Hr], [H] (rank 0 only)
    Buffer c_fc, c_fc_bias;                                 // [Ir, H], [Ir]
    Buffer mlp_proj, mlp_proj_bias;                         // [H, Ir], [H] (rank 0 only)
  };

  TpShard tp_;
  PpStage pp_;
  Backend* backend_ = nullptr;
  Buffer wte_, wpe_;                 // [V, H] first and last stage, [P, H] first stage
  Buffer ln_f_weight_, ln_f_bias_;   // [H], last stage
  Buffer qkv_;                       // [T, 3Hr] scratch
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
  auto model = std::make_unique<Gpt2Model>(config, options);
  RETURN_IF_ERROR(model->Load(loader, backend));
  return model;
}

}  // namespace xserv::model
