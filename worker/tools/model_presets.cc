#include "worker/tools/model_presets.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace xserv::tools {
namespace {

// nlohmann::json keeps object keys sorted, matching transformers' sort_keys=True output.
using Json = nlohmann::json;

constexpr const char* kTransformersVersion = "4.55.0";

Json IdOrNull(const std::optional<int64_t>& id) { return id ? Json(*id) : Json(nullptr); }

const char* TorchDtype(safetensors::DType dtype) {
  return dtype == safetensors::DType::kF32 ? "float32" : "bfloat16";
}

Json Gpt2Config(const ModelShape& s, const SpecialTokens& t) {
  return Json{{"activation_function", "gelu_new"},
              {"architectures", {"GPT2LMHeadModel"}},
              {"attn_pdrop", 0.1},
              {"bos_token_id", IdOrNull(t.bos)},
              {"embd_pdrop", 0.1},
              {"eos_token_id", t.eos.front()},
              {"initializer_range", 0.02},
              {"layer_norm_epsilon", 1e-5},
              {"model_type", "gpt2"},
              {"n_ctx", s.max_position_embeddings},
              {"n_embd", s.hidden_size},
              {"n_head", s.num_heads},
              {"n_inner", s.intermediate_size},
              {"n_layer", s.num_layers},
              {"n_positions", s.max_position_embeddings},
              {"resid_pdrop", 0.1},
              {"summary_activation", nullptr},
              {"summary_first_dropout", 0.1},
              {"summary_proj_to_labels", true},
              {"summary_type", "cls_index"},
              {"summary_use_proj", true},
              {"vocab_size", s.vocab_size}};
}

// Fields every Llama-style decoder config carries.
Json DecoderConfig(const ModelShape& s, const SpecialTokens& t) {
  return Json{{"attention_dropout", 0.0},
              {"bos_token_id", IdOrNull(t.bos)},
              {"eos_token_id", t.eos.front()},
              {"head_dim", s.head_dim},
              {"hidden_act", "silu"},
              {"hidden_size", s.hidden_size},
              {"initializer_range", 0.02},
              {"intermediate_size", s.intermediate_size},
              {"max_position_embeddings", s.max_position_embeddings},
              {"num_attention_heads", s.num_heads},
              {"num_hidden_layers", s.num_layers},
              {"num_key_value_heads", s.num_kv_heads},
              {"tie_word_embeddings", false},
              {"use_cache", true},
              {"vocab_size", s.vocab_size}};
}

Json Qwen3Config(const ModelShape& s, const SpecialTokens& t) {
  Json j = DecoderConfig(s, t);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["attention_bias"] = false;
  j["max_window_layers"] = s.num_layers;
  j["model_type"] = "qwen3";
  j["rms_norm_eps"] = 1e-6;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = 1000000;
  j["sliding_window"] = nullptr;
  j["use_sliding_window"] = false;
  return j;
}

// Llama 3.1 style: llama3 RoPE scaling by 8 from an eighth of the context.
Json LlamaConfig(const ModelShape& s, const SpecialTokens& t) {
  Json j = DecoderConfig(s, t);
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["model_type"] = "llama";
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = 1e-5;
  j["rope_scaling"] = {{"factor", 8.0},
                       {"high_freq_factor", 4.0},
                       {"low_freq_factor", 1.0},
                       {"original_max_position_embeddings", s.max_position_embeddings / 8},
                       {"rope_type", "llama3"}};
  j["rope_theta"] = 500000.0;
  return j;
}

Json GptOssConfig(const ModelShape& s, const SpecialTokens& t) {
  Json j = DecoderConfig(s, t);
  j.erase("bos_token_id");  // the real config has none; generation_config.json carries it
  j["architectures"] = {"GptOssForCausalLM"};
  j["attention_bias"] = true;
  j["experts_per_token"] = s.experts_per_token;
  j["initial_context_length"] = s.yarn_original_max_positions;
  Json layer_types = Json::array();
  for (int64_t i = 0; i < s.num_layers; ++i) {
    layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = std::move(layer_types);
  j["model_type"] = "gpt_oss";
  j["num_experts_per_tok"] = s.experts_per_token;
  j["num_local_experts"] = s.num_experts;
  j["output_router_logits"] = false;
  j["pad_token_id"] = IdOrNull(t.pad);
  j["quantization_config"] = {
      {"modules_to_not_convert",
       {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
      {"quant_method", "mxfp4"}};
  j["rms_norm_eps"] = 1e-5;
  j["rope_scaling"] = {
      {"beta_fast", 32.0},
      {"beta_slow", 1.0},
      {"factor", static_cast<double>(s.max_position_embeddings / s.yarn_original_max_positions)},
      {"original_max_position_embeddings", s.yarn_original_max_positions},
      {"rope_type", "yarn"},
      {"truncate", false}};
  j["rope_theta"] = 150000;
  j["router_aux_loss_coef"] = 0.9;
  j["sliding_window"] = s.sliding_window;
  j["swiglu_limit"] = 7.0;
  return j;
}

}  // namespace

absl::StatusOr<ModelArch> ParseModelArch(std::string_view name) {
  if (name == "gpt2") return ModelArch::kGpt2;
  if (name == "qwen3") return ModelArch::kQwen3;
  if (name == "llama") return ModelArch::kLlama;
  if (name == "gpt-oss") return ModelArch::kGptOss;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --arch \"", std::string(name), "\" (gpt2, qwen3, llama, gpt-oss)"));
}

absl::StatusOr<ModelPreset> ParseModelPreset(std::string_view name) {
  if (name == "tiny") return ModelPreset::kTiny;
  if (name == "small") return ModelPreset::kSmall;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --preset \"", std::string(name), "\" (tiny, small)"));
}

std::string_view ModelArchName(ModelArch arch) {
  switch (arch) {
    case ModelArch::kGpt2: return "gpt2";
    case ModelArch::kQwen3: return "qwen3";
    case ModelArch::kLlama: return "llama";
    case ModelArch::kGptOss: return "gpt-oss";
  }
  return "?";
}

ModelShape PresetShape(ModelArch arch, ModelPreset preset) {
  const bool tiny = preset == ModelPreset::kTiny;
  ModelShape s;
  if (arch == ModelArch::kGpt2) {  // no GQA; head_dim = n_embd / n_head
    s.hidden_size = tiny ? 128 : 512;
    s.num_layers = tiny ? 2 : 8;
    s.num_heads = tiny ? 4 : 8;
    s.num_kv_heads = s.num_heads;
    s.head_dim = s.hidden_size / s.num_heads;
    s.intermediate_size = 4 * s.hidden_size;
    s.max_position_embeddings = 1024;
    return s;
  }
  s.hidden_size = tiny ? 64 : 512;
  s.num_layers = tiny ? 2 : 8;
  s.num_heads = tiny ? 4 : 8;
  s.num_kv_heads = tiny ? 2 : 4;
  s.head_dim = tiny ? 32 : 64;
  s.intermediate_size = tiny ? 128 : 1408;
  s.max_position_embeddings = tiny ? 4096 : 8192;
  if (arch == ModelArch::kGptOss) {
    s.intermediate_size = tiny ? 64 : 512;  // per expert; a multiple of 32 (MXFP4 groups)
    s.num_experts = tiny ? 4 : 8;
    s.experts_per_token = 2;
    s.sliding_window = tiny ? 32 : 128;
    s.yarn_original_max_positions = s.max_position_embeddings / 8;
  }
  return s;
}

std::string ConfigJson(ModelArch arch, const ModelShape& shape, const SpecialTokens& tokens,
                       safetensors::DType dtype) {
  Json j;
  switch (arch) {
    case ModelArch::kGpt2: j = Gpt2Config(shape, tokens); break;
    case ModelArch::kQwen3: j = Qwen3Config(shape, tokens); break;
    case ModelArch::kLlama: j = LlamaConfig(shape, tokens); break;
    case ModelArch::kGptOss: j = GptOssConfig(shape, tokens); break;
  }
  j["torch_dtype"] = TorchDtype(dtype);
  j["transformers_version"] = kTransformersVersion;
  return j.dump(2) + "\n";
}

std::string GenerationConfigJson(const SpecialTokens& tokens) {
  Json j{{"bos_token_id", IdOrNull(tokens.bos)},
         {"eos_token_id", tokens.eos.size() == 1 ? Json(tokens.eos.front()) : Json(tokens.eos)},
         {"transformers_version", kTransformersVersion}};
  if (tokens.pad) j["pad_token_id"] = *tokens.pad;
  return j.dump(2) + "\n";
}

}  // namespace xserv::tools
