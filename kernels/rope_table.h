// Rotary-embedding tables (cos/sin per position) for the RoPE variants our models use, computed on
// the host once at load. The scaling variant only changes the inverse frequencies (and, for YaRN,
// an attention factor folded into cos and sin), so one Rope op serves every model.
//
// Pure functions; safe from any thread. Formulas follow HF transformers' rope init functions
// (default, linear, llama3, yarn) including their fp32 arithmetic, so tables match HF's.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace xserv::kernels {

struct RopeSpec {
  enum class Type { kDefault, kLinear, kLlama3, kYarn };
  Type type = Type::kDefault;
  int head_dim = 0;           // rotary dimension (whole head; partial rotary is not supported)
  double theta = 10000.0;
  double factor = 1.0;        // linear / llama3 / yarn
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 0;  // llama3 / yarn
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 0.0;  // 0: derived from factor (0.1 * ln(factor) + 1)
};

// Inverse frequencies [head_dim / 2] as HF computes them (fp32).
absl::StatusOr<std::vector<float>> RopeInverseFrequencies(const RopeSpec& spec);

// The magnitude multiplier applied to cos and sin (1 except for YaRN).
double RopeAttentionFactor(const RopeSpec& spec);

// Table f32 [max_positions, head_dim]: row p holds cos(p * inv_freq[i]) * af for i < head_dim/2,
// then sin(...) * af, where af = RopeAttentionFactor(spec).
absl::StatusOr<std::vector<float>> BuildRopeTable(const RopeSpec& spec, int max_positions);

}  // namespace xserv::kernels
