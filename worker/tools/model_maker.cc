#include "worker/tools/model_maker.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/safetensors/float_convert.h"
#include "common/safetensors/writer.h"
#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "kernels/fp8.h"
#include "nlohmann/json.hpp"
#include "worker/tools/random_weights.h"

namespace xserv::tools {
namespace {

namespace fs = std::filesystem;
using safetensors::DType;

// One checkpoint tensor to generate. kMxfp4 expands into name_blocks and name_scales of the
// [experts, rows, in] matrix given by shape.
struct TensorPlan {
  enum class Kind { kDense, kMxfp4, kFp8 };
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::kNormal;
  Kind kind = Kind::kDense;
};

void Dense(std::vector<TensorPlan>& plan, std::string name, std::vector<int64_t> shape,
           Init init = Init::kNormal) {
  plan.push_back({std::move(name), std::move(shape), init, TensorPlan::Kind::kDense});
}

std::vector<TensorPlan> Gpt2Plan(const ModelShape& s) {
  // The original checkpoint's names (no "transformer." prefix) and Conv1D [in, out] weights.
  const int64_t h = s.hidden_size, inner = s.intermediate_size;
  std::vector<TensorPlan> plan;
  Dense(plan, "wte.weight", {s.vocab_size, h});
  Dense(plan, "wpe.weight", {s.max_position_embeddings, h});
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    Dense(plan, p + "ln_1.weight", {h}, Init::kNorm);
    Dense(plan, p + "ln_1.bias", {h});
    Dense(plan, p + "attn.c_attn.weight", {h, 3 * h});
    Dense(plan, p + "attn.c_attn.bias", {3 * h});
    Dense(plan, p + "attn.c_proj.weight", {h, h});
    Dense(plan, p + "attn.c_proj.bias", {h});
    Dense(plan, p + "ln_2.weight", {h}, Init::kNorm);
    Dense(plan, p + "ln_2.bias", {h});
    Dense(plan, p + "mlp.c_fc.weight", {h, inner});
    Dense(plan, p + "mlp.c_fc.bias", {inner});
    Dense(plan, p + "mlp.c_proj.weight", {inner, h});
    Dense(plan, p + "mlp.c_proj.bias", {h});
  }
  Dense(plan, "ln_f.weight", {h}, Init::kNorm);
  Dense(plan, "ln_f.bias", {h});
  return plan;
}

void AttentionPlan(std::vector<TensorPlan>& plan, const ModelShape& s, const std::string& p,
                   bool biases, bool qk_norm) {
  const int64_t h = s.hidden_size, q = s.num_heads * s.head_dim, kv = s.num_kv_heads * s.head_dim;
  const std::string a = p + "self_attn.";
  Dense(plan, a + "q_proj.weight", {q, h});
  Dense(plan, a + "k_proj.weight", {kv, h});
  Dense(plan, a + "v_proj.weight", {kv, h});
  Dense(plan, a + "o_proj.weight", {h, q});
  if (biases) {
    Dense(plan, a + "q_proj.bias", {q});
    Dense(plan, a + "k_proj.bias", {kv});
    Dense(plan, a + "v_proj.bias", {kv});
    Dense(plan, a + "o_proj.bias", {h});
  }
  if (qk_norm) {
    Dense(plan, a + "q_norm.weight", {s.head_dim}, Init::kNorm);
    Dense(plan, a + "k_norm.weight", {s.head_dim}, Init::kNorm);
  }
}

std::vector<TensorPlan> DecoderPlan(ModelArch arch, const ModelShape& s) {
  const int64_t h = s.hidden_size, inter = s.intermediate_size, e = s.num_experts;
  const bool gpt_oss = arch == ModelArch::kGptOss;
  std::vector<TensorPlan> plan;
  Dense(plan, "model.embed_tokens.weight", {s.vocab_size, h});
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    Dense(plan, p + "input_layernorm.weight", {h}, Init::kNorm);
    AttentionPlan(plan, s, p, /*biases=*/gpt_oss, /*qk_norm=*/arch == ModelArch::kQwen3);
    if (gpt_oss) Dense(plan, p + "self_attn.sinks", {s.num_heads});
    Dense(plan, p + "post_attention_layernorm.weight", {h}, Init::kNorm);
    if (gpt_oss) {
      const std::string x = p + "mlp.experts.";
      Dense(plan, p + "mlp.router.weight", {e, h});
      Dense(plan, p + "mlp.router.bias", {e});
      plan.push_back({x + "gate_up_proj", {e, 2 * inter, h}, Init::kNormal,
                      TensorPlan::Kind::kMxfp4});
      Dense(plan, x + "gate_up_proj_bias", {e, 2 * inter});
      plan.push_back({x + "down_proj", {e, h, inter}, Init::kNormal, TensorPlan::Kind::kMxfp4});
      Dense(plan, x + "down_proj_bias", {e, h});
    } else {
      Dense(plan, p + "mlp.gate_proj.weight", {inter, h});
      Dense(plan, p + "mlp.up_proj.weight", {inter, h});
      Dense(plan, p + "mlp.down_proj.weight", {h, inter});
    }
  }
  Dense(plan, "model.norm.weight", {h}, Init::kNorm);
  Dense(plan, "lm_head.weight", {s.vocab_size, h});
  return plan;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Owns the bytes the writer's TensorViews borrow.
struct EncodedTensors {
  std::vector<std::vector<std::byte>> storage;
  std::vector<safetensors::TensorView> views;

  void Add(std::string name, DType dtype, std::vector<int64_t> shape,
           std::vector<std::byte> bytes) {
    storage.push_back(std::move(bytes));
    views.push_back({std::move(name), dtype, std::move(shape), {}});
  }
  void BindViews() {
    for (size_t i = 0; i < views.size(); ++i) views[i].data = storage[i];
  }
};

EncodedTensors Generate(const std::vector<TensorPlan>& plan, uint64_t seed, DType dtype,
                        int64_t fp8_block) {
  EncodedTensors out;
  for (const TensorPlan& t : plan) {
    const std::vector<float> values = RandomValues(seed, t.name, NumElements(t.shape), t.init);
    if (t.kind == TensorPlan::Kind::kDense) {
      out.Add(t.name, dtype, t.shape, EncodeFloats(values, dtype));
      continue;
    }
    if (t.kind == TensorPlan::Kind::kFp8) {
      // Quantised from the bf16 rounding of the values, as FP8 releases are made from their
      // BF16 masters: the same bf16 checkpoint quantised on load (--quantization fp8) gives
      // exactly these codes and scales.
      std::vector<float> master(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        master[i] = safetensors::Bf16ToFloat(safetensors::FloatToBf16(values[i]));
      }
      const int64_t rows = t.shape[0], cols = t.shape[1];
      const kernels::Fp8Blocks q = kernels::QuantizeFp8Blocks(master, rows, cols, fp8_block);
      std::vector<std::byte> codes(q.codes.size());
      std::memcpy(codes.data(), q.codes.data(), codes.size());
      out.Add(t.name, DType::kF8E4M3, t.shape, std::move(codes));
      out.Add(t.name + "_scale_inv", DType::kBF16,
              {(rows + fp8_block - 1) / fp8_block, (cols + fp8_block - 1) / fp8_block},
              EncodeFloats(q.scale_inv, DType::kBF16));
      continue;
    }
    const int64_t experts = t.shape[0], rows = t.shape[1], in = t.shape[2];
    Mxfp4Tensor q = QuantizeMxfp4(values, experts * rows, in);
    out.Add(t.name + "_blocks", DType::kU8, {experts, rows, in / 32, 16}, std::move(q.blocks));
    out.Add(t.name + "_scales", DType::kU8, {experts, rows, in / 32}, std::move(q.scales));
  }
  out.BindViews();
  return out;
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

absl::Status WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

// A special-token entry of tokenizer_config.json: "<|x|>", {"content": "<|x|>", ...} or null.
std::optional<std::string> TokenString(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

absl::StatusOr<SpecialTokens> ResolveSpecialTokens(const tokenizer::Tokenizer& tok,
                                          const std::string& tokenizer_dir) {
  const fs::path config_path = fs::path(tokenizer_dir) / "tokenizer_config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFile(config_path));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": not a JSON object"));
  }
  auto resolve = [&](const char* key) -> absl::StatusOr<std::optional<int64_t>> {
    const std::optional<std::string> token = TokenString(config, key);
    if (!token) return std::optional<int64_t>();
    const std::optional<uint32_t> id = tok.TokenToId(*token);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": ", key, " \"",
                                                     *token, "\" is not in tokenizer.json"));
    }
    return std::optional<int64_t>(*id);
  };
  SpecialTokens tokens;
  ASSIGN_OR_RETURN(const std::optional<int64_t> bos, resolve("bos_token"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> eos, resolve("eos_token"));
  ASSIGN_OR_RETURN(tokens.pad, resolve("pad_token"));
  if (!eos) {
    return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": no eos_token"));
  }
  tokens.bos = bos ? bos : tokens.pad;
  tokens.eos.push_back(*eos);
  if (tokens.pad && *tokens.pad != *eos) tokens.eos.push_back(*tokens.pad);
  return tokens;
}

}  // namespace

int64_t PaddedVocabSize(int64_t tokenizer_vocab) { return (tokenizer_vocab + 63) / 64 * 64; }

absl::Status MakeModel(const MakeModelOptions& options) {
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF32) {
    return absl::InvalidArgumentError("MakeModel: dtype must be bf16 or f32");
  }
  const bool fp8 = options.fp8_block > 0;
  if (options.fp8_block < 0 ||
      (fp8 && (options.arch == ModelArch::kGpt2 || options.arch == ModelArch::kGptOss))) {
    return absl::InvalidArgumentError(
        "MakeModel: fp8_block must be positive and is for qwen3 and llama only");
  }
  if (options.hidden_size < 0 || options.hidden_size % 8 != 0 ||
      (options.hidden_size > 0 && options.arch != ModelArch::kQwen3 &&
       options.arch != ModelArch::kLlama)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MakeModel: hidden_size must be 0 or a positive multiple of 8, for qwen3 and llama only; "
        "got ",
        options.hidden_size));
  }
  if (options.num_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeModel: num_layers must be positive, got ", options.num_layers));
  }
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromFile(options.tokenizer_dir));
  ASSIGN_OR_RETURN(const SpecialTokens tokens, ResolveSpecialTokens(*tok, options.tokenizer_dir));
  ModelShape shape = PresetShape(options.arch, options.preset);
  shape.vocab_size = PaddedVocabSize(tok->vocab_size());
  if (options.num_layers > 0) shape.num_layers = options.num_layers;
  if (options.hidden_size > 0) shape.hidden_size = options.hidden_size;

  const fs::path out(options.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(out.string(), ": cannot create: ", ec.message()));
  }
  std::string config = ConfigJson(options.arch, shape, tokens, options.dtype);
  if (fp8) {  // Qwen3-8B-FP8's block, exactly its four keys
    nlohmann::json j = nlohmann::json::parse(config);
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {options.fp8_block, options.fp8_block}}};
    config = j.dump(2);
  }
  RETURN_IF_ERROR(WriteFile(out / "config.json", config));
  RETURN_IF_ERROR(WriteFile(out / "generation_config.json", GenerationConfigJson(tokens)));

  std::vector<TensorPlan> plan = options.arch == ModelArch::kGpt2
                                     ? Gpt2Plan(shape)
                                     : DecoderPlan(options.arch, shape);
  if (fp8) {  // every linear of attention and MLP, as in the FP8 releases
    for (TensorPlan& t : plan) {
      if (t.name.starts_with("model.layers.") && t.name.ends_with("_proj.weight")) {
        t.kind = TensorPlan::Kind::kFp8;
      }
    }
  }
  const EncodedTensors tensors = Generate(plan, options.seed, options.dtype, options.fp8_block);
  // transformers refuses safetensors files whose metadata lacks format "pt".
  RETURN_IF_ERROR(safetensors::WriteSafetensors((out / "model.safetensors").string(),
                                                tensors.views, {{"format", "pt"}}));

  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    const fs::path src = fs::path(options.tokenizer_dir) / name;
    if (!fs::exists(src, ec)) continue;
    fs::copy_file(src, out / name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copy ", src.string(), " to ", out.string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::tools
