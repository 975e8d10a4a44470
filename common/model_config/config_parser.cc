#include "common/model_config/config_parser.h"

#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_config/config_sections.h"
#include "common/model_config/json_fields.h"
#include "common/status.h"

namespace xserv {
namespace {

using config_json::JsonFields;

// transformers' class defaults for the fields each family may omit.
struct FamilyDefaults {
  // Llama falls back to num_heads (MHA). The other classes default to a fixed count (8 or 32)
  // that is wrong for most sizes, so for them the field is required.
  bool num_kv_heads_required = true;
  std::optional<int64_t> head_dim{};  // nullopt: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool qk_norm = false;
  std::optional<int64_t> bos_token_id{};
  std::optional<int64_t> eos_token_id{};
};

FamilyDefaults DefaultsFor(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama:
      return {.num_kv_heads_required = false,
              .max_position_embeddings = 2048,
              .bos_token_id = 1,
              .eos_token_id = 2};
    case Architecture::kMistral:
      return {.max_position_embeddings = 4096 * 32, .bos_token_id = 1, .eos_token_id = 2};
    case Architecture::kQwen2:
      // Qwen2 hard-codes a bias on q/k/v (not o) whatever attention_bias says.
      return {.max_position_embeddings = 32768, .qkv_bias = true};
    case Architecture::kQwen3:
      return {.head_dim = 128, .max_position_embeddings = 32768, .qk_norm = true};
    case Architecture::kGptOss:
      return {.head_dim = 64,
              .max_position_embeddings = 131072,
              .rms_norm_eps = 1e-5,
              .rope_theta = 150000.0,
              .qkv_bias = true,
              .o_proj_bias = true};
    case Architecture::kGpt2:
      break;
  }
  return {};
}

absl::Status InvalidField(const JsonFields& fields, std::string_view key, std::string_view what) {
  return fields.FieldError(key, what);
}

absl::Status ParseTokenIds(const JsonFields& fields, const FamilyDefaults& defaults,
                           ModelConfig* config) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bos, fields.Int("bos_token_id"));
  config->bos_token_id =
      fields.IsNull("bos_token_id") ? std::nullopt : (bos ? bos : defaults.bos_token_id);
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> eos, fields.IntOrIntList("eos_token_id"));
  if (eos.has_value()) {
    config->eos_token_ids = std::move(*eos);
  } else if (!fields.IsNull("eos_token_id") && defaults.eos_token_id.has_value()) {
    config->eos_token_ids = {*defaults.eos_token_id};
  }
  ASSIGN_OR_RETURN(config->pad_token_id, fields.Int("pad_token_id"));
  ASSIGN_OR_RETURN(std::optional<std::string> dtype, fields.String("torch_dtype"));
  if (!dtype.has_value()) {
    ASSIGN_OR_RETURN(dtype, fields.String("dtype"));
  }
  config->torch_dtype = dtype.value_or("");
  return absl::OkStatus();
}

// head_dim explicit, or the family default, or hidden / heads (which must then divide).
absl::StatusOr<int64_t> ResolveHeadDim(const JsonFields& fields, const FamilyDefaults& defaults,
                                       int64_t hidden_size, int64_t num_heads) {
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, fields.Int("head_dim"));
  if (head_dim.has_value()) return *head_dim;
  if (defaults.head_dim.has_value()) return *defaults.head_dim;
  if (num_heads <= 0 || hidden_size % num_heads != 0) {
    return InvalidField(fields, "num_attention_heads",
                        absl::StrCat(num_heads, " does not divide hidden_size (", hidden_size,
                                     ") and head_dim is not given"));
  }
  return hidden_size / num_heads;
}

// Llama-family decoders: Llama, Mistral, Qwen2, Qwen3, gpt-oss.
absl::StatusOr<ModelConfig> ParseDecoder(const JsonFields& fields, Architecture architecture) {
  const FamilyDefaults defaults = DefaultsFor(architecture);
  ModelConfig config;
  config.architecture = architecture;
  ASSIGN_OR_RETURN(config.vocab_size, fields.RequiredInt("vocab_size"));
  ASSIGN_OR_RETURN(config.hidden_size, fields.RequiredInt("hidden_size"));
  ASSIGN_OR_RETURN(config.intermediate_size, fields.RequiredInt("intermediate_size"));
  ASSIGN_OR_RETURN(config.num_layers, fields.RequiredInt("num_hidden_layers"));
  ASSIGN_OR_RETURN(config.num_heads, fields.RequiredInt("num_attention_heads"));
  if (defaults.num_kv_heads_required) {
    ASSIGN_OR_RETURN(config.num_kv_heads, fields.RequiredInt("num_key_value_heads"));
  } else {
    ASSIGN_OR_RETURN(config.num_kv_heads, fields.IntOr("num_key_value_heads", config.num_heads));
  }
  ASSIGN_OR_RETURN(config.head_dim,
                   ResolveHeadDim(fields, defaults, config.hidden_size, config.num_heads));
  ASSIGN_OR_RETURN(config.max_position_embeddings,
                   fields.IntOr("max_position_embeddings", defaults.max_position_embeddings));
  config.norm_type = NormType::kRmsNorm;
  ASSIGN_OR_RETURN(config.norm_eps, fields.NumberOr("rms_norm_eps", defaults.rms_norm_eps));
  ASSIGN_OR_RETURN(std::optional<std::string> act, fields.String("hidden_act"));
  ASSIGN_OR_RETURN(config.activation, ParseActivation(fields, "hidden_act", act.value_or("silu")));
  config.position_encoding = PositionEncoding::kRope;
  ASSIGN_OR_RETURN(config.rope,
                   ParseRope(fields, defaults.rope_theta, config.max_position_embeddings,
                             architecture == Architecture::kGptOss));
  ASSIGN_OR_RETURN(config.tie_word_embeddings, fields.BoolOr("tie_word_embeddings", false));

  // attention_bias switches all four projections where the family reads it; Qwen2 ignores it.
  if (architecture == Architecture::kQwen2) {
    config.qkv_bias = true;
    config.o_proj_bias = false;
  } else {
    ASSIGN_OR_RETURN(const bool attention_bias, fields.BoolOr("attention_bias", defaults.qkv_bias));
    config.qkv_bias = attention_bias;
    config.o_proj_bias = attention_bias;
  }
  // gpt-oss experts and router always carry biases; Llama has an mlp_bias switch.
  ASSIGN_OR_RETURN(config.mlp_bias,
                   fields.BoolOr("mlp_bias", architecture == Architecture::kGptOss));
  config.qk_norm = defaults.qk_norm;

  RETURN_IF_ERROR(ParseLayerTypes(fields, architecture, &config));
  RETURN_IF_ERROR(ParseMoe(fields, architecture, &config.moe));
  ASSIGN_OR_RETURN(config.quantization, ParseQuantization(fields));
  RETURN_IF_ERROR(ParseTokenIds(fields, defaults, &config));
  return config;
}

absl::StatusOr<ModelConfig> ParseGpt2(const JsonFields& fields) {
  ModelConfig config;
  config.architecture = Architecture::kGpt2;
  ASSIGN_OR_RETURN(config.vocab_size, fields.RequiredInt("vocab_size"));
  // transformers maps hidden_size -> n_embd etc.; accept either spelling, prefer GPT-2's own.
  const std::string hidden_key = fields.FirstPresent({"n_embd", "hidden_size"}).value_or("n_embd");
  const std::string layers_key =
      fields.FirstPresent({"n_layer", "num_hidden_layers"}).value_or("n_layer");
  const std::string heads_key =
      fields.FirstPresent({"n_head", "num_attention_heads"}).value_or("n_head");
  ASSIGN_OR_RETURN(config.hidden_size, fields.RequiredInt(hidden_key));
  ASSIGN_OR_RETURN(config.num_layers, fields.RequiredInt(layers_key));
  ASSIGN_OR_RETURN(config.num_heads, fields.RequiredInt(heads_key));
  config.num_kv_heads = config.num_heads;
  if (config.num_heads <= 0 || config.hidden_size % config.num_heads != 0) {
    return InvalidField(fields, heads_key,
                        absl::StrCat(config.num_heads, " does not divide ", hidden_key, " (",
                                     config.hidden_size, ")"));
  }
  config.head_dim = config.hidden_size / config.num_heads;
  // n_inner null means 4 * n_embd.
  ASSIGN_OR_RETURN(config.intermediate_size, fields.IntOr("n_inner", 4 * config.hidden_size));
  const std::string positions_key =
      fields.FirstPresent({"n_positions", "max_position_embeddings"}).value_or("n_positions");
  ASSIGN_OR_RETURN(config.max_position_embeddings, fields.IntOr(positions_key, 1024));
  config.norm_type = NormType::kLayerNorm;
  ASSIGN_OR_RETURN(config.norm_eps, fields.NumberOr("layer_norm_epsilon", 1e-5));
  ASSIGN_OR_RETURN(std::optional<std::string> act, fields.String("activation_function"));
  ASSIGN_OR_RETURN(config.activation,
                   ParseActivation(fields, "activation_function", act.value_or("gelu_new")));
  config.position_encoding = PositionEncoding::kLearned;
  // GPT2Config leaves tie_word_embeddings to PretrainedConfig, whose default is true.
  ASSIGN_OR_RETURN(config.tie_word_embeddings, fields.BoolOr("tie_word_embeddings", true));
  config.qkv_bias = true;
  config.o_proj_bias = true;
  config.mlp_bias = true;
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    ASSIGN_OR_RETURN(const bool enabled, fields.BoolOr(key, false));
    if (enabled) return InvalidField(fields, key, "true is not supported");
  }
  ASSIGN_OR_RETURN(const bool scale_attn, fields.BoolOr("scale_attn_weights", true));
  if (!scale_attn) return InvalidField(fields, "scale_attn_weights", "false is not supported");
  config.layer_types.assign(config.num_layers, AttentionType::kFull);
  ASSIGN_OR_RETURN(config.quantization, ParseQuantization(fields));
  FamilyDefaults defaults;
  defaults.bos_token_id = 50256;
  defaults.eos_token_id = 50256;
  RETURN_IF_ERROR(ParseTokenIds(fields, defaults, &config));
  return config;
}

absl::StatusOr<ModelConfig> ParseFields(const JsonFields& fields) {
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, fields.String("model_type"));
  if (!model_type.has_value()) return InvalidField(fields, "model_type", "required but missing");
  ModelConfig config;
  if (*model_type == "gpt2") {
    ASSIGN_OR_RETURN(config, ParseGpt2(fields));
  } else if (*model_type == "llama") {
    ASSIGN_OR_RETURN(config, ParseDecoder(fields, Architecture::kLlama));
  } else if (*model_type == "mistral") {
    ASSIGN_OR_RETURN(config, ParseDecoder(fields, Architecture::kMistral));
  } else if (*model_type == "qwen2") {
    ASSIGN_OR_RETURN(config, ParseDecoder(fields, Architecture::kQwen2));
  } else if (*model_type == "qwen3") {
    ASSIGN_OR_RETURN(config, ParseDecoder(fields, Architecture::kQwen3));
  } else if (*model_type == "gpt_oss") {
    ASSIGN_OR_RETURN(config, ParseDecoder(fields, Architecture::kGptOss));
  } else {
    return InvalidField(fields, "model_type",
                        absl::StrCat("unsupported model_type \"", *model_type, "\" (supported: ",
                                     absl::StrJoin(SupportedModelTypes(), ", "), ")"));
  }
  config.model_type = *model_type;
  absl::Status valid = config.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(fields.label(), ": ", valid.message()));
  }
  return config;
}

}  // namespace

std::vector<std::string> SupportedModelTypes() {
  return {"gpt2", "gpt_oss", "llama", "mistral", "qwen2", "qwen3"};
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view label) {
  ASSIGN_OR_RETURN(const nlohmann::json json, config_json::ParseJsonObject(json_text, label));
  try {  // defensive: typed access never throws, but this is the module's adapter boundary
    return ParseFields(JsonFields(json, std::string(label)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": ", e.what()));
  }
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::filesystem::path file(path);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file.string(), ": cannot open"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseModelConfig(text, file.string());
}

}  // namespace xserv
