// gpt-oss: pre-norm decoder with biased attention projections, learned per-head attention sinks,
// alternating sliding-window / full layers, YaRN RoPE, and a sparse MoE (router top-k with softmax
// over the selected logits; experts with a clamped GLU and biases).
//
//   h = embed(ids)
//   per layer:  h += o(attn_sinks_window(rope(q(n1(h))), ...));  h += Experts(n2(h), topk(router))
//   logits = lm_head(norm(h))
//
// Expert weights come as MXFP4 blocks/scales (the HF checkpoint) or dense tensors in HF's parameter
// layout [E, in, out]; both become ExpertWeights in [E, out, in] for the backend. A CUDA backend
// keeps MXFP4 as it is, or, quantising on load with FP8 matmuls (--quantization fp8
// --fp8-matmuls true), keeps the experts as FP8 codes and block scales; otherwise (the CPU
// backend takes dense experts) they are decoded on the host at load.
//
// Tensor parallelism splits each expert's intermediate dimension (every rank holds every expert):
// gate_up is column-parallel (this rank's interleaved gate/up row pairs), down row-parallel (its
// columns; down_bias on rank 0, zeros elsewhere, since Experts adds it per routed expert), and
// the Experts output is all-reduced. This keeps the Experts op unchanged; expert parallelism
// would need an op that skips experts this rank does not hold.
//
// Pipeline parallelism as in llama.cc: the first stage embeds, the last holds the final norm and
// lm_head; a stage's layers keep their global index, so the sliding / full alternation holds.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/fp8.h"
#include "kernels/mxfp4.h"
#include "worker/model/architectures.h"
#include "worker/model/layers.h"
#include "worker/model/pipeline_parallel.h"

namespace xserv::model {
namespace {

// [E, in, out] (HF parameter layout) -> [E, out, in] at dst (as many values).
void TransposeExperts(const std::vector<float>& src, int64_t experts, int64_t in, int64_t out,
                      float* dst) {
  for (int64_t e = 0; e < experts; ++e) {
    const float* s = src.data() + e * in * out;
    float* d = dst + e * in * out;
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t o = 0; o < out; ++o) d[o * in + i] = s[i * out + o];
    }
  }
}

// Host floats of an expert matrix: [experts, rows, in] values. Left uninitialised when made:
// zero-filling 2 GB per tensor first would cost as much as decoding it.
struct HostExperts {
  std::unique_ptr<float[]> values;
  size_t size = 0;
  int64_t experts = 0, rows = 0, in = 0;

  HostExperts() = default;
  HostExperts(int64_t e, int64_t r, int64_t i)
      : values(new float[static_cast<size_t>(e * r * i)]),
        size(static_cast<size_t>(e * r * i)),
        experts(e),
        rows(r),
        in(i) {}
  bool ok() const { return values != nullptr; }
  std::span<float> span() { return {values.get(), size}; }
};

// One expert matrix [E, rows, in] from `name` (MXFP4 `_blocks`/`_scales` or dense) as floats.
HostExperts ReadExpertMatrix(WeightLoader& loader, const std::string& name, int64_t experts,
                             int64_t rows, int64_t in) {
  if (loader.Has(name + "_blocks")) {
    const int64_t groups = in / 32;
    std::vector<uint8_t> blocks =
        loader.TakeBytes(name + "_blocks", {experts, rows, groups, 16}, kernels::DType::kU8);
    std::vector<uint8_t> scales =
        loader.TakeBytes(name + "_scales", {experts, rows, groups}, kernels::DType::kU8);
    if (blocks.empty() || scales.empty()) return {};
    HostExperts dense(experts, rows, in);
    if (!kernels::DequantizeMxfp4(blocks, scales, experts * rows, groups, dense.span()).ok()) {
      return {};
    }
    return dense;
  }
  std::vector<float> host;
  if (!loader.ReadHostFloats(name, {experts, in, rows}, host)) return {};
  HostExperts dense(experts, rows, in);
  TransposeExperts(host, experts, in, rows, dense.values.get());
  return dense;
}

// `slice` (dim 1: rows, dim 2: in, one range) of the [E, rows, in] expert matrix `name`.
HostExperts ReadExpertMatrixSlice(WeightLoader& loader, const std::string& name, int64_t experts,
                                  int64_t rows, int64_t in, const TensorSlice& slice) {
  const int64_t begin = slice.ranges[0].begin, end = slice.ranges[0].end;
  const int64_t out_rows = slice.dim == 1 ? end - begin : rows;
  const int64_t out_in = slice.dim == 2 ? end - begin : in;
  if (loader.Has(name + "_blocks")) {
    // MXFP4 packs 32 inputs per block: read the blocks that cover an input range, decode, crop.
    const int64_t groups = in / 32;
    TensorSlice stored = slice;
    int64_t first_group = 0, num_groups = groups;
    if (slice.dim == 2) {
      first_group = begin / 32;
      num_groups = (end + 31) / 32 - first_group;
      stored.ranges = {{first_group, first_group + num_groups}};
    }
    std::vector<uint8_t> blocks = loader.TakeBytes(
        name + "_blocks", {experts, rows, groups, 16}, kernels::DType::kU8, stored);
    std::vector<uint8_t> scales =
        loader.TakeBytes(name + "_scales", {experts, rows, groups}, kernels::DType::kU8, stored);
    if (blocks.empty() || scales.empty()) return {};
    const int64_t decoded_in = num_groups * 32, n = experts * out_rows;
    std::vector<float> decoded(static_cast<size_t>(n * decoded_in));
    if (!kernels::DequantizeMxfp4(blocks, scales, n, num_groups, decoded).ok()) return {};
    HostExperts dense(experts, out_rows, out_in);
    const int64_t skip = slice.dim == 2 ? begin - first_group * 32 : 0;
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(decoded.begin() + r * decoded_in + skip, out_in,
                  dense.values.get() + r * out_in);
    }
    return dense;
  }
  // HF parameter layout [E, in, rows]: our dim 1 is its dim 2 and vice versa.
  const TensorSlice stored{.dim = 3 - slice.dim, .ranges = slice.ranges};
  std::vector<float> host;
  if (!loader.ReadHostFloats(name, {experts, in, rows}, stored, host)) return {};
  HostExperts dense(experts, out_rows, out_in);
  TransposeExperts(host, experts, out_in, out_rows, dense.values.get());
  return dense;
}

// An expert matrix on the device: dense values (through FP8 and back when quantising on load),
// or, with `fp8`, E4M3 codes [E, rows, in] and the f32 scales of their 128 x 128 blocks
// [E, ceil(rows/128), ceil(in/128)] (ExpertWeights::Format::kFp8).
struct DeviceExperts {
  Buffer values, scales;
};
DeviceExperts UploadExpertMatrix(WeightLoader& loader, HostExperts& m, bool fp8) {
  if (!m.ok()) return {};  // the loader recorded why
  if (!fp8) {
    loader.QuantizeFp8InPlace(m.span(), m.experts, m.rows, m.in);
    return {loader.Upload(m.span(), {m.experts, m.rows, m.in}), {}};
  }
  const int64_t b = loader.quantize_fp8_block();
  const int64_t row_blocks = (m.rows + b - 1) / b, col_blocks = (m.in + b - 1) / b;
  const size_t per_expert = static_cast<size_t>(m.rows * m.in);
  std::vector<uint8_t> codes(m.size);
  std::vector<float> scales(static_cast<size_t>(m.experts * row_blocks * col_blocks));
  for (int64_t e = 0; e < m.experts; ++e) {
    const kernels::Fp8Blocks q =
        kernels::QuantizeFp8Blocks(m.span().subspan(e * per_expert, per_expert), m.rows, m.in, b);
    std::copy(q.codes.begin(), q.codes.end(), codes.begin() + e * per_expert);
    std::copy(q.scale_inv.begin(), q.scale_inv.end(),
              scales.begin() + e * row_blocks * col_blocks);
  }
  return {loader.UploadBytes(codes, {m.experts, m.rows, m.in}),
          loader.Upload(scales, {m.experts, row_blocks, col_blocks}, kernels::DType::kF32)};
}

class GptOssModel final : public Model {
 public:
  GptOssModel(const ModelConfig& config, const ModelLoadOptions& options)
      : Model(config, RankConfig(config, TpShard::FromOptions(options)), options),
        tp_(TpShard::FromOptions(options)),
        pp_(PpStage::FromOptions(options, config.num_layers)) {}

  absl::Status Load(WeightLoader& loader, Backend& backend) {
    const ModelConfig& c = config();
    backend_ = &backend;
    const int64_t h = c.hidden_size, inter = c.intermediate_size, e = c.moe.num_experts;
    if (inter % 32 != 0 || h % 32 != 0) {
      return absl::InvalidArgumentError("gpt-oss: hidden and intermediate sizes must be multiples "
                                        "of 32 (MXFP4 blocks)");
    }
    if (pp_.first()) {
      embed_ = EmbeddingTable::Load(loader, tp_, VocabShard::Of(c, tp_),
                                    "model.embed_tokens.weight", c);
    } else {
      loader.Ignore("model.embed_tokens.weight");
    }
    if (pp_.last()) {
      lm_head_ = TakeLmHead(loader, backend, VocabShard::Of(c, tp_), "lm_head.weight", c);
      final_norm_ = loader.Take("model.norm.weight", {h});
    } else {
      loader.Ignore("lm_head.weight");
      loader.Ignore("model.norm.weight");
    }
    IgnoreOtherStagesLayers(loader, pp_, c.num_layers, "model.layers.");
    for (int64_t i = pp_.first_layer; i < pp_.first_layer + pp_.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer layer;
      layer.input_norm = loader.Take(p + "input_layernorm.weight", {h});
      layer.post_attention_norm = loader.Take(p + "post_attention_layernorm.weight", {h});
      layer.attention = AttentionWeights::Load(loader, backend, c, tp_, p);
      layer.router = loader.Take(p + "mlp.router.weight", {e, h});
      layer.router_bias = loader.Take(p + "mlp.router.bias", {e});
      LoadExperts(loader, c, p + "mlp.experts.", layer);
      layers_.push_back(std::move(layer));
    }
    ASSIGN_OR_RETURN(rope_, LoadRopeTable(c, max_positions(), backend));
    const ModelConfig& rc = rank_config();
    ASSIGN_OR_RETURN(ws_, Workspace::Allocate(backend, rc, max_num_tokens(), rc.intermediate_size));
    const int64_t k = c.moe.num_experts_per_tok;
    ASSIGN_OR_RETURN(router_logits_, backend.Allocate(kernels::DType::kF32, {max_num_tokens(), e}));
    ASSIGN_OR_RETURN(topk_ids_, backend.Allocate(kernels::DType::kI32, {max_num_tokens(), k}));
    ASSIGN_OR_RETURN(topk_weights_, backend.Allocate(kernels::DType::kF32, {max_num_tokens(), k}));
    glu_.limit = static_cast<float>(c.moe.swiglu_limit);
    glu_.alpha = static_cast<float>(c.moe.swiglu_alpha);
    return absl::OkStatus();
  }

  absl::Status Forward(const ForwardInputs& in, std::span<const kernels::KvLayer> kv,
                       const Tensor& logits, const Tensor* hidden) override {
    Backend& b = *backend_;
    RETURN_IF_ERROR(CheckInputs(in, kv, logits, hidden, b.compute_dtype()));
    const ModelConfig& c = config();
    const int64_t tokens = in.token_ids.dim(0);
    const float eps = static_cast<float>(c.norm_eps);
    const Tensor residual = ws_.residual.view().SliceRows(0, tokens);
    const Tensor normed = ws_.normed.view().SliceRows(0, tokens);
    const Tensor block_out = ws_.block_out.view().SliceRows(0, tokens);
    const Tensor router_logits = router_logits_.view().SliceRows(0, tokens);
    const Tensor topk_ids = topk_ids_.view().SliceRows(0, tokens);
    const Tensor topk_weights = topk_weights_.view().SliceRows(0, tokens);
    if (pp_.first()) {
      RETURN_IF_ERROR(embed_.Run(b, tp_.comm, in, residual));
    } else {  // a same-dtype Convert is a device copy on every backend
      RETURN_IF_ERROR(b.Convert(*hidden, residual));
    }
    // The previous layer's experts already added their output to the residual and normalised
    // it for this layer (ExpertsAddRmsNorm).
    bool normed_ready = false;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      if (i == 0) {  // the stage's input is a complete residual: nothing pending to add
        RETURN_IF_ERROR(b.RmsNorm(residual, layer.input_norm.view(), eps, normed));
      } else if (!normed_ready) {
        RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, layer.input_norm.view(), eps, normed));
      }
      // The global index picks the layer's sliding window.
      RETURN_IF_ERROR(RunAttention(b, rank_config(), layer.attention, normed, &rope_.view(),
                                   pp_.first_layer + static_cast<int64_t>(i), in, kv[i], ws_,
                                   tokens));
      RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      RETURN_IF_ERROR(
          b.AddRmsNorm(block_out, residual, layer.post_attention_norm.view(), eps, normed));
      RETURN_IF_ERROR(b.Matmul(normed, layer.router.view(), &layer.router_bias.view(),
                               router_logits));
      RETURN_IF_ERROR(b.RouterTopK(router_logits, topk_ids, topk_weights));
      kernels::ExpertWeights experts;
      experts.gate_up_bias = layer.gate_up_bias.view();
      experts.down_bias = layer.down_bias.view();
      experts.format = layer.format;
      if (layer.format != kernels::ExpertWeights::Format::kDense) {
        experts.gate_up_blocks = layer.gate_up.view();
        experts.gate_up_scales = layer.gate_up_scales.view();
        experts.down_blocks = layer.down.view();
        experts.down_scales = layer.down_scales.view();
      } else {
        experts.gate_up = layer.gate_up.view();
        experts.down = layer.down.view();
      }
      // On one rank the experts' output goes straight into the next norm on this stage (the next
      // layer's, or the final one): a backend may fold the combine into it.
      const Buffer* next_norm = i + 1 < layers_.size() ? &layers_[i + 1].input_norm
                                : pp_.last()           ? &final_norm_
                                                       : nullptr;
      normed_ready = !tp_.sharded() && next_norm != nullptr;
      if (normed_ready) {
        RETURN_IF_ERROR(b.ExpertsAddRmsNorm(normed, topk_ids, topk_weights, experts, glu_,
                                            block_out, residual, next_norm->view(), eps, normed));
      } else {
        RETURN_IF_ERROR(b.Experts(normed, topk_ids, topk_weights, experts, glu_, block_out));
        RETURN_IF_ERROR(AllReduceSum(tp_.comm, b, block_out));
      }
    }
    // The last experts' output is still pending: the next stage gets residual + block_out.
    if (!pp_.last()) return b.Add(residual, block_out, *hidden);
    if (!normed_ready) {
      RETURN_IF_ERROR(b.AddRmsNorm(block_out, residual, final_norm_.view(), eps, normed));
    }
    return RunLmHead(b, normed, lm_head_, VocabShard::Of(config(), tp_), tp_.comm, in, ws_,
                     logits);
  }

 private:
  struct Layer {
    Buffer input_norm, post_attention_norm;  // [H]
    AttentionWeights attention;
    Buffer router, router_bias;              // [E, H], [E]
    // I is this rank's share of intermediate_size.
    Buffer gate_up, gate_up_bias;            // [E, 2I, H] (rows interleave gate/up), [E, 2I]
    Buffer down, down_bias;                  // [E, H, I], [E, H] (zeros on ranks other than 0)
    // kMxfp4: gate_up and down hold the checkpoint's u8 blocks ([E, 2I, H/32, 16],
    // [E, H, I/32, 16]) and these their u8 scales ([E, 2I, H/32], [E, H, I/32]); kFp8: E4M3
    // codes and f32 block scales (ExpertWeights).
    kernels::ExpertWeights::Format format = kernels::ExpertWeights::Format::kDense;
    Buffer gate_up_scales, down_scales;
  };

  // Whether this rank keeps the experts in MXFP4 (decoded in the kernels): a CUDA backend, an
  // MXFP4 checkpoint, no FP8 requantisation, and a TP split of the intermediate features on
  // whole 32-input groups. Otherwise they are decoded to dense at load.
  bool KeepsMxfp4(const WeightLoader& loader, const ModelConfig& c, const std::string& x) const {
    return backend_->device() == kernels::DeviceType::kCuda &&
           loader.Has(x + "gate_up_proj_blocks") && !loader.quantizes_fp8() &&
           SplitsIntoWholeGroups(c);
  }

  // Whether this rank's share of the intermediate features is whole 32-input groups, as the
  // quantised experts' kernels need (moe_quantized.h).
  bool SplitsIntoWholeGroups(const ModelConfig& c) const {
    const int64_t inter = c.intermediate_size;
    return inter % tp_.size == 0 && (inter / tp_.size) % 32 == 0;
  }

  void LoadMxfp4Experts(WeightLoader& loader, const ModelConfig& c, const std::string& x,
                        Layer& layer) {
    const int64_t h = c.hidden_size, inter = c.intermediate_size, e = c.moe.num_experts;
    const kernels::DType u8 = kernels::DType::kU8;
    layer.format = kernels::ExpertWeights::Format::kMxfp4;
    const std::vector<int64_t> gu_blocks = {e, 2 * inter, h / 32, 16};
    const std::vector<int64_t> gu_scales = {e, 2 * inter, h / 32};
    const std::vector<int64_t> dn_blocks = {e, h, inter / 32, 16};
    const std::vector<int64_t> dn_scales = {e, h, inter / 32};
    if (!tp_.sharded()) {
      layer.gate_up = loader.Take(x + "gate_up_proj_blocks", gu_blocks, u8);
      layer.gate_up_scales = loader.Take(x + "gate_up_proj_scales", gu_scales, u8);
      layer.down = loader.Take(x + "down_proj_blocks", dn_blocks, u8);
      layer.down_scales = loader.Take(x + "down_proj_scales", dn_scales, u8);
      return;
    }
    // Gate/up row pairs as in the dense split; down's input features as whole groups.
    const TensorSlice rows = tp_.Split(1, 2 * inter);
    layer.gate_up = loader.Take(x + "gate_up_proj_blocks", gu_blocks, rows, u8);
    layer.gate_up_scales = loader.Take(x + "gate_up_proj_scales", gu_scales, rows, u8);
    const TensorSlice groups = tp_.Split(2, inter / 32);
    layer.down = loader.Take(x + "down_proj_blocks", dn_blocks, groups, u8);
    layer.down_scales = loader.Take(x + "down_proj_scales", dn_scales, groups, u8);
  }

  // Whether this rank keeps the experts in FP8 (decoded in the kernels): a CUDA backend that
  // multiplies FP8 weights (--fp8-matmuls) quantising on load with the kernels' 128 x 128 blocks.
  // Otherwise quantised experts are decoded to dense at load.
  bool KeepsFp8(const WeightLoader& loader, const ModelConfig& c) const {
    return backend_->device() == kernels::DeviceType::kCuda && loader.fp8_matmuls() &&
           loader.quantize_fp8_block() == kernels::kFp8ExpertBlock && SplitsIntoWholeGroups(c);
  }

  void LoadExperts(WeightLoader& loader, const ModelConfig& c, const std::string& x,
                   Layer& layer) {
    const int64_t h = c.hidden_size, inter = c.intermediate_size, e = c.moe.num_experts;
    // Under TP, features [rank * I / tp, ...) are gate/up row pairs [2 * rank * I / tp, ...).
    const TensorSlice gate_up_rows = tp_.Split(1, 2 * inter);
    if (KeepsMxfp4(loader, c, x)) {
      LoadMxfp4Experts(loader, c, x, layer);
    } else {
      const bool fp8 = KeepsFp8(loader, c);
      // One matrix's host floats at a time (2 GB each for gpt-oss-20b): freed once uploaded.
      const auto load = [&](const std::string& name, int64_t rows, int64_t in,
                            const TensorSlice& slice) {
        HostExperts m = tp_.sharded() ? ReadExpertMatrixSlice(loader, name, e, rows, in, slice)
                                      : ReadExpertMatrix(loader, name, e, rows, in);
        return UploadExpertMatrix(loader, m, fp8);
      };
      DeviceExperts gu = load(x + "gate_up_proj", 2 * inter, h, gate_up_rows);
      DeviceExperts dn = load(x + "down_proj", h, inter, tp_.Split(2, inter));
      layer.format = fp8 ? kernels::ExpertWeights::Format::kFp8
                         : kernels::ExpertWeights::Format::kDense;
      layer.gate_up = std::move(gu.values);
      layer.gate_up_scales = std::move(gu.scales);
      layer.down = std::move(dn.values);
      layer.down_scales = std::move(dn.scales);
    }
    if (!tp_.sharded()) {
      layer.gate_up_bias = loader.Take(x + "gate_up_proj_bias", {e, 2 * inter});
      layer.down_bias = loader.Take(x + "down_proj_bias", {e, h});
      return;
    }
    layer.gate_up_bias = loader.Take(x + "gate_up_proj_bias", {e, 2 * inter}, gate_up_rows);
    const std::string down_bias = x + "down_proj_bias";
    if (tp_.rank != 0 && loader.Has(down_bias)) {
      loader.Ignore(down_bias);
      layer.down_bias = loader.Upload(std::vector<float>(static_cast<size_t>(e * h), 0.0f), {e, h});
    } else {
      layer.down_bias = loader.Take(down_bias, {e, h});
    }
  }

  TpShard tp_;
  PpStage pp_;
  Backend* backend_ = nullptr;
  EmbeddingTable embed_;         // first stage
  LinearWeight lm_head_;         // last stage
  Buffer final_norm_;            // last stage
  Buffer rope_;
  Buffer router_logits_, topk_ids_, topk_weights_;  // [T, E] f32, [T, k] i32, [T, k] f32
  std::vector<Layer> layers_;
  Workspace ws_;
  kernels::GluParams glu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadGptOss(const ModelConfig& config, WeightLoader& loader,
                                                  Backend& backend,
                                                  const ModelLoadOptions& options) {
  auto model = std::make_unique<GptOssModel>(config, options);
  RETURN_IF_ERROR(model->Load(loader, backend));
  return model;
}

}  // namespace xserv::model
