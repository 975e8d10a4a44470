#include "common/model_config/model_config.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv {
namespace {

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("model config: ", std::string(field), ": ", std::string(what)));
}

absl::Status CheckPositive(std::string_view field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be positive, got ", value));
}

absl::Status CheckPositiveFinite(std::string_view field, double value) {
  if (std::isfinite(value) && value > 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be a positive finite number, got ", value));
}

absl::Status ValidateRope(const RopeConfig& rope) {
  RETURN_IF_ERROR(CheckPositiveFinite("rope_theta", rope.theta));
  const RopeScaling& s = rope.scaling;
  switch (s.type) {
    case RopeScalingType::kNone:
      return absl::OkStatus();
    case RopeScalingType::kLinear:
      return CheckPositiveFinite("rope_scaling.factor", s.factor);
    case RopeScalingType::kLlama3:
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.factor", s.factor));
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.low_freq_factor", s.low_freq_factor));
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.high_freq_factor", s.high_freq_factor));
      if (s.high_freq_factor <= s.low_freq_factor) {
        // The llama3 ramp divides by (high - low).
        return Invalid("rope_scaling.high_freq_factor",
                       absl::StrCat("must exceed low_freq_factor (", s.high_freq_factor,
                                    " <= ", s.low_freq_factor, ")"));
      }
      return CheckPositive("rope_scaling.original_max_position_embeddings",
                           s.original_max_position_embeddings);
    case RopeScalingType::kYarn:
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.factor", s.factor));
      if (s.factor < 1.0) {
        return Invalid("rope_scaling.factor",
                       absl::StrCat("yarn needs factor >= 1, got ", s.factor));
      }
      RETURN_IF_ERROR(CheckPositive("rope_scaling.original_max_position_embeddings",
                                    s.original_max_position_embeddings));
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.beta_fast", s.beta_fast));
      RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.beta_slow", s.beta_slow));
      if (s.beta_fast < s.beta_slow) {
        return Invalid("rope_scaling.beta_fast", absl::StrCat("must be >= beta_slow (", s.beta_fast,
                                                              " < ", s.beta_slow, ")"));
      }
      if (s.attention_factor.has_value()) {
        RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.attention_factor", *s.attention_factor));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::SlidingWindowForLayer(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layer_types.size())) return 0;
  return layer_types[layer] == AttentionType::kSliding ? sliding_window : 0;
}

absl::Status ModelConfig::Validate() const {
  RETURN_IF_ERROR(CheckPositive("vocab_size", vocab_size));
  RETURN_IF_ERROR(CheckPositive("hidden_size", hidden_size));
  RETURN_IF_ERROR(CheckPositive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(CheckPositive("num_hidden_layers", num_layers));
  RETURN_IF_ERROR(CheckPositive("num_attention_heads", num_heads));
  RETURN_IF_ERROR(CheckPositive("num_key_value_heads", num_kv_heads));
  RETURN_IF_ERROR(CheckPositive("head_dim", head_dim));
  RETURN_IF_ERROR(CheckPositive("max_position_embeddings", max_position_embeddings));
  if (num_heads % num_kv_heads != 0) {
    return Invalid(
        "num_key_value_heads",
        absl::StrCat(num_kv_heads, " does not divide num_attention_heads (", num_heads, ")"));
  }
  RETURN_IF_ERROR(CheckPositiveFinite(
      norm_type == NormType::kRmsNorm ? "rms_norm_eps" : "layer_norm_epsilon", norm_eps));
  if (position_encoding == PositionEncoding::kRope) {
    RETURN_IF_ERROR(ValidateRope(rope));
    if (head_dim % 2 != 0) {
      return Invalid("head_dim", absl::StrCat("RoPE needs an even head_dim, got ", head_dim));
    }
  }
  if (static_cast<int64_t>(layer_types.size()) != num_layers) {
    return Invalid("layer_types", absl::StrCat("has ", layer_types.size(),
                                               " entries but num_hidden_layers is ", num_layers));
  }
  bool any_sliding = false;
  for (size_t i = 0; i < layer_types.size(); ++i) {
    if (layer_types[i] != AttentionType::kSliding) continue;
    any_sliding = true;
    if (sliding_window <= 0) {
      return Invalid("sliding_window", absl::StrCat("layer ", i,
                                                    " is sliding_attention but "
                                                    "sliding_window is not set"));
    }
  }
  if (!any_sliding && sliding_window != 0) {
    return Invalid("sliding_window",
                   absl::StrCat("is ", sliding_window, " but no layer is sliding_attention"));
  }
  if (sliding_window < 0) {
    return Invalid("sliding_window", absl::StrCat("must not be negative, got ", sliding_window));
  }
  if (moe.num_experts < 0) {
    return Invalid("num_local_experts",
                   absl::StrCat("must not be negative, got ", moe.num_experts));
  }
  if (moe.IsMoe()) {
    if (moe.num_experts_per_tok < 1 || moe.num_experts_per_tok > moe.num_experts) {
      return Invalid("num_experts_per_tok",
                     absl::StrCat(moe.num_experts_per_tok,
                                  " is not in [1, num_local_experts = ", moe.num_experts, "]"));
    }
  } else if (moe.num_experts_per_tok != 0) {
    return Invalid("num_experts_per_tok", "set on a model without experts");
  }
  if (moe.swiglu_limit < 0 || !std::isfinite(moe.swiglu_limit)) {
    return Invalid("swiglu_limit", absl::StrCat("must be >= 0, got ", moe.swiglu_limit));
  }
  if (quantization.method == QuantMethod::kFp8 && !quantization.weight_block_size.empty()) {
    if (quantization.weight_block_size.size() != 2 || quantization.weight_block_size[0] <= 0 ||
        quantization.weight_block_size[1] <= 0) {
      return Invalid("quantization_config.weight_block_size", "must be two positive integers");
    }
  }
  for (int64_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return Invalid("eos_token_id",
                     absl::StrCat(eos, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  if (bos_token_id.has_value() && (*bos_token_id < 0 || *bos_token_id >= vocab_size)) {
    return Invalid("bos_token_id",
                   absl::StrCat(*bos_token_id, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return absl::OkStatus();
}

std::string_view ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kGpt2:
      return "gpt2";
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kGptOss:
      return "gpt_oss";
  }
  return "unknown";
}

std::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kGelu:
      return "gelu";
    case Activation::kSilu:
      return "silu";
    case Activation::kRelu:
      return "relu";
  }
  return "unknown";
}

std::string_view RopeScalingTypeName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "default";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
  }
  return "unknown";
}

}  // namespace xserv
