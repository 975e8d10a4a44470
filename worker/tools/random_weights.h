// Deterministic random weights for generated test models, and their encoding into checkpoint
// dtypes (f32, bf16, MXFP4 blocks/scales).
//
// Pure functions and a small value-type generator; no shared state, safe from any thread. Values
// depend only on (seed, tensor name), never on the standard library's distributions (whose
// algorithms are implementation-defined) or on the order tensors are generated in, so the same
// seed gives byte-identical files everywhere and an f32 and a bf16 model of one seed hold the
// same weights up to rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "common/safetensors/dtype.h"

namespace xserv::tools {

// Normal samples from std::mt19937_64 (fully specified by the standard) via Box-Muller.
class NormalGenerator {
 public:
  // The stream for one tensor: seeded from the model seed and the tensor's name.
  NormalGenerator(uint64_t seed, std::string_view tensor_name);

  double Next();  // standard normal

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// How a tensor's values are drawn.
enum class Init {
  kNormal,  // N(0, 0.02): matrices, embeddings, biases
  kNorm,    // 1 + 0.1·N(0, 1): norm gains, so they are not all exactly one
};

std::vector<float> RandomValues(uint64_t seed, std::string_view tensor_name, int64_t count,
                                Init init);

// Little-endian bytes of `values` in `dtype` (kF32 or kBF16, round to nearest even).
std::vector<std::byte> EncodeFloats(std::span<const float> values, safetensors::DType dtype);

// MXFP4 of a [rows, in] matrix (in % 32 == 0), as HF's gpt-oss checkpoints store experts:
// blocks u8 [rows, in/32, 16] (low nibble = even element) and E8M0 scales u8 [rows, in/32].
// Each group's scale is the smallest power of two that fits its largest magnitude into ±6;
// values round to the nearest E2M1 code.
struct Mxfp4Tensor {
  std::vector<std::byte> blocks;
  std::vector<std::byte> scales;
};
Mxfp4Tensor QuantizeMxfp4(std::span<const float> values, int64_t rows, int64_t in);


}  // namespace xserv::tools
