// GenerationConfig: the defaults a checkpoint's generation_config.json sets (stop tokens and
// sampling), which the server applies when a request leaves them unset.
//
// Plain data, copyable; parsed once at start-up and read-only afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv {

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // an int or a list in the file
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Errors are InvalidArgument prefixed with `label`, naming the field: wrong JSON types,
// temperature < 0, top_p outside (0, 1], top_k < 0, min_p outside [0, 1],
// repetition_penalty <= 0, negative token ids.
absl::StatusOr<GenerationConfig> ParseGenerationConfig(
    std::string_view json_text, std::string_view label = "generation_config.json");

// Reads `path` (a generation_config.json, or a directory holding one). The file is optional:
// nullopt when it does not exist; errors only for a file that exists but is bad.
absl::StatusOr<std::optional<GenerationConfig>> LoadGenerationConfigIfPresent(
    const std::string& path);

}  // namespace xserv
