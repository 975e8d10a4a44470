// Parsers for the sub-sections of config.json that several model families share: activation,
// RoPE (theta and rope_scaling / rope_parameters), per-layer attention types, MoE and
// quantization_config. Internal to xserv_model_config (config_parser.cc is the caller).
//
// Free functions with no shared state; errors name the field through JsonFields.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/model_config/json_fields.h"
#include "common/model_config/model_config.h"

namespace xserv {

// hidden_act / activation_function names as transformers' ACT2FN spells them.
absl::StatusOr<Activation> ParseActivation(const config_json::JsonFields& fields,
                                           std::string_view key, const std::string& name);

// rope_theta plus rope_scaling (transformers ≤ 4.x) or rope_parameters (5.x, which also carries
// rope_theta). rope_type "default"/absent, "linear", "llama3" and "yarn" are supported; others
// are refused. gpt-oss without either gets its class default (YaRN, factor 32, no truncation).
absl::StatusOr<RopeConfig> ParseRope(const config_json::JsonFields& fields, double default_theta,
                                     int64_t max_position_embeddings, bool gpt_oss_defaults);

// Fills layer_types and sliding_window (needs num_layers set) with each family's rules:
// explicit layer_types win; gpt-oss alternates sliding/full; Mistral slides every layer when
// sliding_window is set; Qwen2/3 slide layers >= max_window_layers only with use_sliding_window.
absl::Status ParseLayerTypes(const config_json::JsonFields& fields, Architecture architecture,
                             ModelConfig* config);

// num_local_experts, num_experts_per_tok (or gpt-oss's experts_per_token), swiglu_limit/alpha.
absl::Status ParseMoe(const config_json::JsonFields& fields, Architecture architecture,
                      MoeConfig* moe);

// quantization_config: quant_method "mxfp4" or "fp8"; absent means unquantised.
absl::StatusOr<QuantizationConfig> ParseQuantization(const config_json::JsonFields& fields);

}  // namespace xserv
