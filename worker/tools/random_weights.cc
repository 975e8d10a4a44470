#include "worker/tools/random_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>

#include "common/safetensors/float_convert.h"
#include "common/status.h"

namespace xserv::tools {
namespace {

// FNV-1a: a stable hash of the tensor name (std::hash may differ between libraries).
uint64_t HashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// splitmix64 finaliser, so nearby seeds give unrelated engine states.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The non-negative E2M1 magnitudes by code 0..7.
constexpr std::array<float, 8> kFp4Magnitudes{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Nearest E2M1 code (sign in bit 3) of `x`, which is within ±6 after scaling.
uint8_t NearestFp4Code(float x) {
  const float a = std::fabs(x);
  uint8_t best = 0;
  for (uint8_t c = 1; c < kFp4Magnitudes.size(); ++c) {
    if (std::fabs(kFp4Magnitudes[c] - a) < std::fabs(kFp4Magnitudes[best] - a)) best = c;
  }
  return static_cast<uint8_t>(best | (x < 0 && best != 0 ? 0x8 : 0));
}

}  // namespace

NormalGenerator::NormalGenerator(uint64_t seed, std::string_view tensor_name)
    : engine_(Mix(seed ^ Mix(HashName(tensor_name)))) {}

double NormalGenerator::Next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] keeps log() finite; 53 random bits per uniform.
  const double u1 = 1.0 - static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(angle);
  has_spare_ = true;
  return r * std::cos(angle);
}

std::vector<float> RandomValues(uint64_t seed, std::string_view tensor_name, int64_t count,
                                Init init) {
  NormalGenerator gen(seed, tensor_name);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) {
    const double z = gen.Next();
    v = static_cast<float>(init == Init::kNorm ? 1.0 + 0.1 * z : 0.02 * z);
  }
  return values;
}

std::vector<std::byte> EncodeFloats(std::span<const float> values, safetensors::DType dtype) {
  std::vector<std::byte> out;
  if (dtype == safetensors::DType::kF32) {
    out.resize(values.size() * sizeof(float));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  XSERV_CHECK(dtype == safetensors::DType::kBF16);
  out.resize(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = safetensors::FloatToBf16(values[i]);
    std::memcpy(out.data() + 2 * i, &bits, sizeof(bits));  // little-endian host
  }
  return out;
}

Mxfp4Tensor QuantizeMxfp4(std::span<const float> values, int64_t rows, int64_t in) {
  XSERV_CHECK(in % 32 == 0 && static_cast<int64_t>(values.size()) == rows * in);
  const int64_t groups = in / 32;
  Mxfp4Tensor out;
  out.blocks.resize(static_cast<size_t>(rows * groups * 16));
  out.scales.resize(static_cast<size_t>(rows * groups));
  for (int64_t g = 0; g < rows * groups; ++g) {
    const float* v = values.data() + g * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    // 2^e with amax / 2^e <= 6, the largest E2M1 magnitude; E8M0 holds e + 127 in one byte.
    int e = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(amax / 6.0f))) : 0;
    e = std::clamp(e, -127, 127);
    out.scales[g] = static_cast<std::byte>(e + 127);
    for (int b = 0; b < 16; ++b) {
      const uint8_t lo = NearestFp4Code(std::ldexp(v[2 * b], -e));
      const uint8_t hi = NearestFp4Code(std::ldexp(v[2 * b + 1], -e));
      out.blocks[g * 16 + b] = static_cast<std::byte>(lo | (hi << 4));
    }
  }
  return out;
}


}  // namespace xserv::tools
