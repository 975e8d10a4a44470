// Exact conversions between the narrow float formats stored in checkpoints and float.
//
// Pure functions, safe from any thread. Decoding is exact (every BF16, F16 and F8 value is
// representable in float). Encoding rounds to nearest, ties to even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "common/safetensors/dtype.h"

namespace xserv::safetensors {

float Bf16ToFloat(uint16_t bits);
float F16ToFloat(uint16_t bits);
// OCP E4M3 "fn": bias 7, no infinities, 0x7F / 0xFF are NaN, largest finite 448.
float F8E4M3ToFloat(uint8_t bits);
// E5M2: IEEE-like with bias 15, infinities and NaNs.
float F8E5M2ToFloat(uint8_t bits);

// NaN stays NaN (quiet); overflow rounds to infinity, as torch does.
uint16_t FloatToBf16(float value);
uint16_t FloatToF16(float value);
// Finite values beyond ±448 saturate to ±448 (the usual choice when quantising weights:
// E4M3 has no infinity); NaN and ±inf map to NaN (0x7F / 0xFF).
uint8_t FloatToF8E4M3Saturating(float value);

// Decodes `src` (little-endian elements of `dtype`, any alignment) into `dst`, which must hold
// exactly src.size() / DTypeSize(dtype) floats. Float dtypes only (F64 narrows to float);
// integer dtypes are InvalidArgument.
absl::Status ConvertToFloat(DType dtype, std::span<const std::byte> src, std::span<float> dst);

}  // namespace xserv::safetensors
