#include "common/model_config/config_sections.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv {

using config_json::JsonFields;

absl::StatusOr<Activation> ParseActivation(const JsonFields& fields, std::string_view key,
                                           const std::string& name) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    return Activation::kGeluTanh;
  }
  if (name == "gelu") return Activation::kGelu;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "relu") return Activation::kRelu;
  return fields.FieldError(key, absl::StrCat("unsupported activation \"", name,
                                             "\" (supported: gelu_new, gelu_pytorch_tanh, "
                                             "gelu_fast, gelu, silu, swish, relu)"));
}

namespace {

absl::StatusOr<RopeScaling> ParseScaling(const JsonFields& scaling,
                                         int64_t max_position_embeddings) {
  RopeScaling out;
  // transformers reads "rope_type", falling back to the older "type".
  ASSIGN_OR_RETURN(std::optional<std::string> type, scaling.String("rope_type"));
  if (!type.has_value()) {
    ASSIGN_OR_RETURN(type, scaling.String("type"));
  }
  if (!type.has_value()) return scaling.FieldError("rope_type", "required but missing");
  if (*type == "default") return out;
  if (*type == "linear") {
    out.type = RopeScalingType::kLinear;
    ASSIGN_OR_RETURN(std::optional<double> factor, scaling.Number("factor"));
    if (!factor.has_value()) return scaling.FieldError("factor", "required for linear");
    out.factor = *factor;
    return out;
  }
  if (*type == "llama3") {
    out.type = RopeScalingType::kLlama3;
    for (const char* key :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!scaling.Has(key)) return scaling.FieldError(key, "required for llama3");
    }
    ASSIGN_OR_RETURN(out.factor, scaling.NumberOr("factor", 0));
    ASSIGN_OR_RETURN(out.low_freq_factor, scaling.NumberOr("low_freq_factor", 0));
    ASSIGN_OR_RETURN(out.high_freq_factor, scaling.NumberOr("high_freq_factor", 0));
    ASSIGN_OR_RETURN(out.original_max_position_embeddings,
                     scaling.RequiredInt("original_max_position_embeddings"));
    return out;
  }
  if (*type == "yarn") {
    out.type = RopeScalingType::kYarn;
    ASSIGN_OR_RETURN(std::optional<double> factor, scaling.Number("factor"));
    if (!factor.has_value()) return scaling.FieldError("factor", "required for yarn");
    out.factor = *factor;
    // Without it transformers takes max_position_embeddings as the pre-scaling length.
    ASSIGN_OR_RETURN(out.original_max_position_embeddings,
                     scaling.IntOr("original_max_position_embeddings", max_position_embeddings));
    ASSIGN_OR_RETURN(out.beta_fast, scaling.NumberOr("beta_fast", 32.0));
    ASSIGN_OR_RETURN(out.beta_slow, scaling.NumberOr("beta_slow", 1.0));
    ASSIGN_OR_RETURN(out.truncate, scaling.BoolOr("truncate", true));
    ASSIGN_OR_RETURN(out.attention_factor, scaling.Number("attention_factor"));
    // DeepSeek-style mscale changes the attention scale; no served model uses it.
    for (const char* key : {"mscale", "mscale_all_dim"}) {
      if (scaling.Has(key)) return scaling.FieldError(key, "is not supported");
    }
    return out;
  }
  return scaling.FieldError("rope_type", absl::StrCat("unsupported rope_type \"", *type,
                                                      "\" (supported: default, linear, llama3, "
                                                      "yarn)"));
}

}  // namespace

absl::StatusOr<RopeConfig> ParseRope(const JsonFields& fields, double default_theta,
                                     int64_t max_position_embeddings, bool gpt_oss_defaults) {
  RopeConfig rope;
  ASSIGN_OR_RETURN(std::optional<JsonFields> scaling, fields.Object("rope_scaling"));
  ASSIGN_OR_RETURN(std::optional<JsonFields> parameters, fields.Object("rope_parameters"));
  ASSIGN_OR_RETURN(std::optional<double> theta, fields.Number("rope_theta"));
  if (!theta.has_value() && parameters.has_value()) {
    ASSIGN_OR_RETURN(theta, parameters->Number("rope_theta"));
  }
  rope.theta = theta.value_or(default_theta);
  if (!scaling.has_value()) scaling = std::move(parameters);
  if (scaling.has_value()) {
    ASSIGN_OR_RETURN(rope.scaling, ParseScaling(*scaling, max_position_embeddings));
  } else if (gpt_oss_defaults) {
    rope.scaling = RopeScaling{.type = RopeScalingType::kYarn,
                               .factor = 32.0,
                               .original_max_position_embeddings = 4096,
                               .beta_fast = 32.0,
                               .beta_slow = 1.0,
                               .truncate = false};
  }
  return rope;
}

absl::Status ParseLayerTypes(const JsonFields& fields, Architecture architecture,
                             ModelConfig* config) {
  // The window as transformers would hold it (nullopt = None). An absent key takes the class
  // default; an explicit null disables sliding.
  std::optional<int64_t> window;
  auto window_or = [&](int64_t class_default) -> absl::StatusOr<std::optional<int64_t>> {
    if (fields.IsNull("sliding_window")) return std::optional<int64_t>();
    ASSIGN_OR_RETURN(const int64_t value, fields.IntOr("sliding_window", class_default));
    return std::optional<int64_t>(value);
  };
  int64_t max_window_layers = 0;
  switch (architecture) {
    case Architecture::kGptOss: {
      ASSIGN_OR_RETURN(window, window_or(128));
      break;
    }
    case Architecture::kMistral: {
      ASSIGN_OR_RETURN(window, window_or(4096));
      break;
    }
    case Architecture::kQwen2:
    case Architecture::kQwen3: {
      ASSIGN_OR_RETURN(const bool use_sliding, fields.BoolOr("use_sliding_window", false));
      if (use_sliding) {
        ASSIGN_OR_RETURN(window, window_or(4096));
      }
      ASSIGN_OR_RETURN(max_window_layers, fields.IntOr("max_window_layers", 28));
      break;
    }
    case Architecture::kLlama:
    case Architecture::kGpt2:
      break;
  }

  const int64_t num_layers = config->num_layers;
  config->layer_types.clear();
  ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> names, fields.StringList("layer_types"));
  if (names.has_value()) {
    for (size_t i = 0; i < names->size(); ++i) {
      const std::string& name = (*names)[i];
      if (name == "full_attention") {
        config->layer_types.push_back(AttentionType::kFull);
      } else if (name == "sliding_attention") {
        config->layer_types.push_back(AttentionType::kSliding);
      } else {
        return fields.FieldError("layer_types", absl::StrCat("entry ", i, " is \"", name,
                                                             "\" (supported: "
                                                             "full_attention, sliding_attention)"));
      }
    }
    if (static_cast<int64_t>(names->size()) != num_layers) {
      return fields.FieldError("layer_types", absl::StrCat("has ", names->size(),
                                                           " entries but "
                                                           "num_hidden_layers is ",
                                                           num_layers));
    }
  } else {
    for (int64_t i = 0; i < num_layers; ++i) {
      bool sliding = false;
      switch (architecture) {
        case Architecture::kGptOss:
          sliding = i % 2 == 0;
          break;
        case Architecture::kMistral:
          sliding = window.has_value();
          break;
        case Architecture::kQwen2:
        case Architecture::kQwen3:
          sliding = window.has_value() && i >= max_window_layers;
          break;
        case Architecture::kLlama:
        case Architecture::kGpt2:
          break;
      }
      config->layer_types.push_back(sliding ? AttentionType::kSliding : AttentionType::kFull);
    }
  }
  bool any_sliding = false;
  for (AttentionType type : config->layer_types) any_sliding |= type == AttentionType::kSliding;
  // Validate() reports a sliding layer without a window.
  config->sliding_window = any_sliding ? window.value_or(0) : 0;
  if (any_sliding && config->sliding_window <= 0) {
    return fields.FieldError("sliding_window",
                             "layer_types has sliding_attention layers but no positive "
                             "sliding_window is set");
  }
  return absl::OkStatus();
}

absl::Status ParseMoe(const JsonFields& fields, Architecture architecture, MoeConfig* moe) {
  *moe = MoeConfig{};
  if (architecture != Architecture::kGptOss) return absl::OkStatus();
  ASSIGN_OR_RETURN(moe->num_experts, fields.IntOr("num_local_experts", 128));
  // HF spells it num_experts_per_tok; the original gpt-oss config says experts_per_token.
  ASSIGN_OR_RETURN(std::optional<int64_t> per_tok, fields.Int("num_experts_per_tok"));
  ASSIGN_OR_RETURN(std::optional<int64_t> per_token, fields.Int("experts_per_token"));
  if (per_tok.has_value() && per_token.has_value() && *per_tok != *per_token) {
    return fields.FieldError(
        "num_experts_per_tok",
        absl::StrCat(*per_tok, " disagrees with experts_per_token (", *per_token, ")"));
  }
  moe->num_experts_per_tok = per_tok.value_or(per_token.value_or(4));
  ASSIGN_OR_RETURN(moe->swiglu_limit, fields.NumberOr("swiglu_limit", 7.0));
  ASSIGN_OR_RETURN(moe->swiglu_alpha, fields.NumberOr("swiglu_alpha", 1.702));
  return absl::OkStatus();
}

absl::StatusOr<QuantizationConfig> ParseQuantization(const JsonFields& fields) {
  QuantizationConfig out;
  ASSIGN_OR_RETURN(std::optional<JsonFields> quant, fields.Object("quantization_config"));
  if (!quant.has_value()) return out;
  ASSIGN_OR_RETURN(std::optional<std::string> method, quant->String("quant_method"));
  if (!method.has_value()) return quant->FieldError("quant_method", "required but missing");
  if (*method == "mxfp4") {
    out.method = QuantMethod::kMxfp4;
  } else if (*method == "fp8") {
    out.method = QuantMethod::kFp8;
    ASSIGN_OR_RETURN(std::optional<std::string> fmt, quant->String("fmt"));
    if (fmt.has_value() && *fmt != "e4m3") {
      return quant->FieldError(
          "fmt", absl::StrCat("unsupported fp8 format \"", *fmt, "\" (supported: e4m3)"));
    }
    ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> block,
                     quant->IntList("weight_block_size"));
    out.weight_block_size = block.value_or(std::vector<int64_t>{});
  } else {
    return quant->FieldError("quant_method", absl::StrCat("unsupported quant_method \"", *method,
                                                          "\" (supported: mxfp4, fp8)"));
  }
  ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> keep,
                   quant->StringList("modules_to_not_convert"));
  out.modules_to_not_convert = keep.value_or(std::vector<std::string>{});
  return out;
}

}  // namespace xserv
