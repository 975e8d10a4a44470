#include "common/safetensors/float_convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace xserv::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts need byte swaps here");

// Decodes a binary float with `exp_bits` exponent bits and `man_bits` mantissa bits (sign in
// the top bit). `has_inf` selects IEEE behaviour for the all-ones exponent; without it only
// the all-ones pattern is NaN (the OCP "fn" convention).
float DecodeSmallFloat(uint32_t bits, int exp_bits, int man_bits, bool has_inf) {
  const uint32_t sign = (bits >> (exp_bits + man_bits)) & 1u;
  const uint32_t exp = (bits >> man_bits) & ((1u << exp_bits) - 1);
  const uint32_t man = bits & ((1u << man_bits) - 1);
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_max = (1u << exp_bits) - 1;
  float magnitude;
  if (has_inf && exp == exp_max) {
    magnitude =
        man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!has_inf && exp == exp_max && man == (1u << man_bits) - 1) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(man), 1 - bias - man_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>(man + (1u << man_bits)),
                           static_cast<int>(exp) - bias - man_bits);
  }
  return sign ? -magnitude : magnitude;
}

template <typename T>
T LoadUnaligned(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace

float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float F16ToFloat(uint16_t bits) { return DecodeSmallFloat(bits, 5, 10, /*has_inf=*/true); }

float F8E4M3ToFloat(uint8_t bits) { return DecodeSmallFloat(bits, 4, 3, /*has_inf=*/false); }

float F8E5M2ToFloat(uint8_t bits) { return DecodeSmallFloat(bits, 5, 2, /*has_inf=*/true); }

uint16_t FloatToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is correct
  // (it rounds up to the next binade or to infinity).
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

uint16_t FloatToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) return static_cast<uint16_t>(sign | 0x7E00u);
  const float magnitude = std::fabs(value);
  // 65520 is the midpoint between 65504 (largest half) and 65536: ties go to infinity.
  if (magnitude >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00u);
  int exp;
  std::frexp(magnitude, &exp);  // magnitude = m * 2^exp, m in [0.5, 1)
  // Quantum of the target binade; subnormals share the quantum 2^-24.
  const int quantum_exp = std::max(exp - 11, -24);
  // nearbyint uses the default round-to-nearest-even mode; scaling by a power of two is exact.
  const float units = std::nearbyint(std::ldexp(magnitude, -quantum_exp));
  const float rounded = std::ldexp(units, quantum_exp);
  if (rounded == 0.0f) return sign;
  int rexp;
  const float m = std::frexp(rounded, &rexp);
  if (rexp - 1 < -14) {  // subnormal: value = units * 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  const uint32_t mantissa = static_cast<uint32_t>(std::ldexp(m, 11)) - 1024u;  // 10 bits
  const uint32_t biased_exp = static_cast<uint32_t>(rexp - 1 + 15);
  return static_cast<uint16_t>(sign | (biased_exp << 10) | mantissa);
}

uint8_t FloatToF8E4M3Saturating(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value) || std::isinf(value)) return static_cast<uint8_t>(sign | 0x7F);
  const float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return static_cast<uint8_t>(sign | 0x7E);
  // Codes are monotonic in value and evenly spaced within a binade, so the nearest one (ties to
  // the even code) is a round-to-nearest-even of the value in units of its binade's spacing; the
  // scalings are by powers of two (exact), std::nearbyint rounds to nearest even. Below 2^-6 the
  // subnormal codes are 2^-9 apart, and 8 units there is the first normal code.
  if (magnitude < 0.015625f) {
    return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(magnitude * 512.0f)));
  }
  int exp = 0;
  std::frexp(magnitude, &exp);  // magnitude in [2^(exp - 1), 2^exp)
  const int binade = exp - 1;
  // 8 .. 16 units of 2^(binade - 3): 16 is the next binade's first code, which the sum reaches.
  const int units = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 3 - binade)));
  const int code = ((binade + 7) << 3) + units - 8;
  return static_cast<uint8_t>(sign | (code > 0x7E ? 0x7E : code));
}

absl::Status ConvertToFloat(DType dtype, std::span<const std::byte> src, std::span<float> dst) {
  const size_t element_size = DTypeSize(dtype);
  if (src.size() % element_size != 0 || src.size() / element_size != dst.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ConvertToFloat: ", src.size(), " bytes of ",
                                                   std::string(DTypeName(dtype)), " do not make ",
                                                   dst.size(), " elements"));
  }
  const std::byte* p = src.data();
  switch (dtype) {
    case DType::kF64:
      for (float& out : dst) out = static_cast<float>(LoadUnaligned<double>(p)), p += 8;
      return absl::OkStatus();
    case DType::kF32:
      if (!dst.empty()) std::memcpy(dst.data(), src.data(), src.size());
      return absl::OkStatus();
    case DType::kF16:
      for (float& out : dst) out = F16ToFloat(LoadUnaligned<uint16_t>(p)), p += 2;
      return absl::OkStatus();
    case DType::kBF16:
      for (float& out : dst) out = Bf16ToFloat(LoadUnaligned<uint16_t>(p)), p += 2;
      return absl::OkStatus();
    case DType::kF8E4M3:
      for (float& out : dst) out = F8E4M3ToFloat(static_cast<uint8_t>(*p++));
      return absl::OkStatus();
    case DType::kF8E5M2:
      for (float& out : dst) out = F8E5M2ToFloat(static_cast<uint8_t>(*p++));
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("ConvertToFloat: ", std::string(DTypeName(dtype)), " is not a float dtype"));
  }
}

}  // namespace xserv::safetensors
