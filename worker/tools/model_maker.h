// MakeModel: writes a HuggingFace-format model directory with deterministic random weights
// (config.json, generation_config.json, model.safetensors, tokenizer files) for tests, benchmarks
// and demos. Tensor names, shapes and dtypes follow the real checkpoints of each architecture
// (GPT-2's unprefixed Conv1D layout, Qwen3/Llama's model.layers.*, gpt-oss's MXFP4 experts), so
// the directory loads with our LoadModel and with transformers.
//
// A free function with no shared state; concurrent calls must use different output directories.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/safetensors/dtype.h"
#include "worker/tools/model_presets.h"

namespace xserv::tools {

struct MakeModelOptions {
  ModelArch arch = ModelArch::kQwen3;
  ModelPreset preset = ModelPreset::kTiny;
  uint64_t seed = 0;
  std::string tokenizer_dir;  // holds tokenizer.json and tokenizer_config.json
  std::string out_dir;        // created if absent; existing files of the same names are replaced
  // Dtype of every dense tensor (kBF16 or kF32); gpt-oss experts are MXFP4 either way.
  safetensors::DType dtype = safetensors::DType::kBF16;
  // Layer count overriding the preset's (0: the preset's), e.g. deeper tiny models for pipeline
  // parallelism tests; negative is InvalidArgument.
  int64_t num_layers = 0;
  // Hidden size overriding the preset's (0: the preset's), Qwen3 and Llama only (their heads
  // need not span it), e.g. rows long enough for kernels that take only those; a positive
  // multiple of 8.
  int64_t hidden_size = 0;
  // > 0: Qwen3/Llama attention and MLP weights as FP8 E4M3 with [b, b] block scales
  // (`weight_scale_inv`, BF16) and config.json's quantization_config "fp8", the Qwen3-8B-FP8
  // layout; the other tensors keep `dtype`. Not for GPT-2 or gpt-oss (InvalidArgument).
  int64_t fp8_block = 0;
};

// The model's vocabulary: the tokenizer's (added tokens included) rounded up to a multiple of 64,
// as real checkpoints pad their embedding tables.
int64_t PaddedVocabSize(int64_t tokenizer_vocab);

// Special ids come from tokenizer_config.json (bos_token / eos_token / pad_token, each a string
// or an {"content": ...} object) resolved through tokenizer.json: bos falls back to the pad token
// (Qwen names <|endoftext|> as both); generation_config.json's eos list is eos_token, then the pad
// token when it differs (the stop lists of Qwen3's and gpt-oss's real generation configs).
absl::Status MakeModel(const MakeModelOptions& options);

}  // namespace xserv::tools
