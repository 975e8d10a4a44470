// Shapes and HF config files of the models xserv-make-model generates: one preset table per
// architecture and size, and the config.json / generation_config.json text of each, written the
// way transformers v4 writes them (top-level rope_theta, rope_scaling), as the real checkpoints do.
//
// Pure functions over plain data; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/dtype.h"

namespace xserv::tools {

enum class ModelArch { kGpt2, kQwen3, kLlama, kGptOss };
enum class ModelPreset { kTiny, kSmall };

absl::StatusOr<ModelArch> ParseModelArch(std::string_view name);  // gpt2, qwen3, llama, gpt-oss
absl::StatusOr<ModelPreset> ParseModelPreset(std::string_view name);  // tiny, small
std::string_view ModelArchName(ModelArch arch);

// Sizes of one generated model. vocab_size is filled in from the tokenizer.
struct ModelShape {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;  // per expert for gpt-oss
  int64_t max_position_embeddings = 0;
  // gpt-oss only
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t sliding_window = 0;
  int64_t yarn_original_max_positions = 0;  // max_position_embeddings / yarn factor
};

ModelShape PresetShape(ModelArch arch, ModelPreset preset);

// Special token ids resolved through the tokenizer.
struct SpecialTokens {
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;  // config.json gets the first, generation_config.json all
  std::optional<int64_t> pad;
};

// JSON text with sorted keys and a 2-space indent, as transformers' save_pretrained writes it.
std::string ConfigJson(ModelArch arch, const ModelShape& shape, const SpecialTokens& tokens,
                       safetensors::DType dtype);
std::string GenerationConfigJson(const SpecialTokens& tokens);

}  // namespace xserv::tools
