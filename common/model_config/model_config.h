// ModelConfig: the architecture of a decoder-only model, parsed from HF config.json.
//
// Plain data, copyable; built once at start-up (config_parser.h) and read-only afterwards, so
// any thread may read it. Validate() checks the invariants every model file relies on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace xserv {

enum class Architecture { kGpt2, kLlama, kMistral, kQwen2, kQwen3, kGptOss };
enum class NormType { kLayerNorm, kRmsNorm };
enum class Activation {
  kGeluTanh,  // "gelu_new", "gelu_pytorch_tanh", "gelu_fast": tanh approximation
  kGelu,      // "gelu": exact erf form
  kSilu,      // "silu", "swish"
  kRelu,
};
enum class PositionEncoding { kLearned, kRope };  // GPT-2 learns absolute positions
enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };
enum class AttentionType { kFull, kSliding };
enum class QuantMethod { kNone, kMxfp4, kFp8 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  // yarn: floor/ceil the correction range (transformers' default true; gpt-oss sets false).
  bool truncate = true;
  std::optional<double> attention_factor{};  // yarn: overrides 0.1·ln(factor) + 1
};

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling;
};

struct MoeConfig {
  int64_t num_experts = 0;  // 0: dense MLP
  int64_t num_experts_per_tok = 0;
  // gpt-oss clamped SwiGLU: gate clamped above, up on both sides, sigmoid gain alpha. 0: none.
  double swiglu_limit = 0.0;
  double swiglu_alpha = 1.702;
  bool IsMoe() const { return num_experts > 0; }
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  std::vector<std::string> modules_to_not_convert;  // glob-like patterns, as in the file
  std::vector<int64_t> weight_block_size;           // fp8 block-wise scales, e.g. {128, 128}
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // as written in config.json

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP, or per expert for MoE
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // explicit in config.json, or hidden_size / num_heads
  int64_t max_position_embeddings = 0;

  NormType norm_type = NormType::kRmsNorm;
  double norm_eps = 1e-6;
  Activation activation = Activation::kSilu;
  PositionEncoding position_encoding = PositionEncoding::kRope;
  RopeConfig rope;  // meaningful only with kRope

  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // q/k/v projections carry a bias
  bool o_proj_bias = false;  // output projection carries a bias
  bool mlp_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3)

  std::vector<AttentionType> layer_types;  // one per layer
  int64_t sliding_window = 0;              // window of kSliding layers; 0 when none is sliding

  MoeConfig moe;
  QuantizationConfig quantization;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json allows an int or a list
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype;  // "bfloat16", ... ("torch_dtype" or newer "dtype"); empty if absent

  // Sliding window for `layer` (0 = full attention).
  int64_t SlidingWindowForLayer(int64_t layer) const;

  // InvalidArgument naming the offending field when sizes are not positive, heads do not
  // divide, layer_types has the wrong length, a sliding layer has no window, MoE or RoPE
  // parameters are inconsistent.
  absl::Status Validate() const;
};

std::string_view ArchitectureName(Architecture architecture);  // the model_type spelling
std::string_view ActivationName(Activation activation);
std::string_view RopeScalingTypeName(RopeScalingType type);

}  // namespace xserv
