// gpt-oss: pre-norm decoder with biased attention projections, learned per-head attention sinks,
// alternating sliding-window / full layers, YaRN RoPE, and a sparse MoE (router top-k with softmax
// over the selected logits; experts with a clamped GLU and biases).
//
//   h = embed(ids)
//   per layer:  h += o(attn_sinks_window(rope(q(n1(h))), ...));  h += Experts(n2(h), topk(router))
//   logits = lm_head(norm(h))
//
// Expert weights come as MXFP4 blocks/scales (the HF checkpoint) or dense tensors in HF's parameter
// layout [E, in, out]; both become ExpertWeights in [E, out, in] for the backend. The CPU backend
// takes dense experts, so MXFP4 is decoded on the host at load.
#include <vector>

#include "common/status.h"
#include "kernels/mxfp4.h"
#include "worker/model/architectures.h"
#include "worker/model/layers.h"

namespace xserv::model {
namespace {

// [E, in, out] (HF parameter layout) -> [E, out, in].
std::vector<float> TransposeExperts(const std::vector<float>& src, int64_t experts, int64_t in,
                                    int64_t out) {
  std::vector<float> dst(src.size());
  for (int64_t e = 0; e < experts; ++e) {
    const float* s = src.data() + e * in * out;
    float* d = dst.data() + e * in * out;
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t o = 0; o < out; ++o) d[o * in + i] = s[i * out + o];
    }
  }
  return dst;
}

// One expert matrix [E, rows, in] from `name` (MXFP4 `_blocks`/`_scales` or dense).
Buffer LoadExpertMatrix(WeightLoader& loader, const std::string& name, int64_t experts,
                        int64_t rows, int64_t in) {
  if (loader.Has(name + "_blocks")) {
    const int64_t groups = in / 32;
    std::vector<uint8_t> blocks =
        loader.TakeBytes(name + "_blocks", {experts, rows, groups, 16}, kernels::DType::kU8);
    std::vector<uint8_t> scales =
        loader.TakeBytes(name + "_scales", {experts, rows, groups}, kernels::DType::kU8);
    if (blocks.empty() || scales.empty()) return {};
    std::vector<float> dense(static_cast<size_t>(experts * rows * in));
    if (!kernels::DequantizeMxfp4(blocks, scales, experts * rows, groups, dense).ok()) return {};
    return loader.Upload(dense, {experts, rows, in});
  }
  std::vector<float> host;
  if (!loader.ReadHostFloats(name, {experts, in, rows}, host)) return {};
  return loader.Upload(TransposeExperts(host, experts, in, rows), {experts, rows, in});
}

class GptOssModel final : public Model {
 public:
  GptOssModel(ModelConfig config, int max_tokens) : Model(std::move(config), max_tokens) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    const int64_t h = c.hidden_size, inter = c.intermediate_size, e = c.moe.num_experts;
    if (inter % 32 != 0 || h % 32 != 0) {
      return absl::InvalidArgumentError("gpt-oss: hidden and intermediate sizes must be multiples "
                                        "of 32 (MXFP4 blocks)");
    }
    embed_ = loader.Take("model.embed_tokens.weight", {c.vocab_size, h});
    lm_head_ = loader.Take("lm_head.weight", {c.vocab_size, h});
    final_norm_ = loader.Take("model.norm.weight", {h});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer layer;
      layer.input_norm = loader.Take(p + "input_layernorm.weight", {h});
      layer.post_attention_norm = loader.Take(p + "post_attention_layernorm.weight", {h});
      layer.attention = AttentionWeights::Load(loader, c, p);
      layer.router = loader.Take(p + "mlp.router.weight", {e, h});
      layer.router_bias = loader.Take(p + "mlp.router.bias", {e});
      const std::string x = p + "mlp.experts.";
      layer.gate_up = LoadExpertMatrix(loader, x + "gate_up_proj", e, 2 * inter, h);
      layer.gate_up_bias = loader.Take(x + "gate_up_proj_bias", {e, 2 * inter});
      layer.down = LoadExpertMatrix(loader, x + "down_proj", e, h, inter);
      layer.down_bias = loader.Take(x + "down_proj_bias", {e, h});
      layers_.push_back(std::move(layer));
    }
    ASSIGN_OR_RETURN(rope_, LoadRopeTable(c, backend));
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, c, max_num_tokens(), inter));
    const int64_t k = c.moe.num_experts_per_tok;
    ASSIGN_OR_RETURN(router_logits_, backend.Allocate(kernels::DType::kF32, {max_num_tokens(), e}));
    ASSIGN_OR_RETURN(topk_ids_, backend.Allocate(kernels::DType::kI32, {max_num_tokens(), k}));
    ASSIGN_OR_RETURN(topk_weights_, backend.Allocate(kernels::DType::kF32, {max_num_tokens(), k}));
    glu_.limit = static_cast<float>(c.moe.swiglu_limit);
    glu_.alpha = static_cast<float>(c.moe.swiglu_alpha);
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
    const Tensor router_logits = router_logits_.view().SliceRows(0, tokens);
    const Tensor topk_ids = topk_ids_.view().SliceRows(0, tokens);
    const Tensor topk_weights = topk_weights_.view().SliceRows(0, tokens);
    RETURN_IF_ERROR(b.Embedding(embed_.view(), in.token_ids, residual, /*accumulate=*/false));
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      if (i == 0) {
        RETURN_IF_ERROR(b.RmsNorm(residual, layer.input_norm.view(), eps, normed));
      } else {
        RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, layer.input_norm.view(), eps, normed));
      }
      RETURN_IF_ERROR(RunAttention(b, c, layer.attention, normed, &rope_.view(),
                                   static_cast<int64_t>(i), in, kv[i], ws_, tokens));
      RETURN_IF_ERROR(
          b.AddRmsNorm(block_out, residual, layer.post_attention_norm.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.router.view(), &layer.router_bias.view(),
                               router_logits));
      RETURN_IF_ERROR(b.RouterTopK(router_logits, topk_ids, topk_weights));
      kernels::ExpertWeights experts;
      experts.gate_up = layer.gate_up.view();
      experts.gate_up_bias = layer.gate_up_bias.view();
      experts.down = layer.down.view();
      experts.down_bias = layer.down_bias.view();
      RETURN_IF_ERROR(b.Experts(normed, topk_ids, topk_weights, experts, glu_, block_out));
    }
    RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, final_norm_.view(), eps, normed));
    return RunLmHead(b, normed, lm_head_.view(), in, ws_, logits);
  }

 private:
  struct Layer {
    Buffer input_norm, post_attention_norm;  // [H]
    AttentionWeights attention;
    Buffer router, router_bias;              // [E, H], [E]
    Buffer gate_up, gate_up_bias;            // [E, 2I, H] (rows interleave gate/up), [E, 2I]
    Buffer down, down_bias;                  // [E, H, I], [E, H]
  };

  Backend* backend_ = nullptr;
  Buffer embed_, lm_head_, final_norm_, rope_;
  Buffer router_logits_, topk_ids_, topk_weights_;  // [T, E] f32, [T, k] i32, [T, k] f32
  std::vector<Layer> layers_;
  Workspace ws_;
  kernels::GluParams glu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadGptOss(const ModelConfig& config, WeightLoader& loader,
                                                  Backend& backend,
                                                  const ModelLoadOptions& options) {
  auto model = std::make_unique<GptOssModel>(config, options.max_num_tokens);
  RETURN_IF_ERROR(model->Load(loader, backend));
  return model;
}

}  // namespace xserv::model
