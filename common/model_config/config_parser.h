// Parsing HF config.json into ModelConfig, for the architectures xserv serves.
//
// Free functions with no shared state, safe from any thread. Fields absent from config.json
// take transformers' class defaults for that model_type (e.g. tie_word_embeddings: true for
// gpt2, false for the others); the sizes that define a model are required.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"

namespace xserv {

// The model_type values ParseModelConfig accepts.
std::vector<std::string> SupportedModelTypes();

// Parses and Validate()s. Errors are InvalidArgument prefixed with `label` (the file path) and
// naming the field; an unknown model_type lists the supported ones.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text,
                                             std::string_view label = "config.json");

// Reads `path`: a config.json file, or a directory holding one.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace xserv
