// Element types of the safetensors format, spelled as the format spells them ("BF16", "F8_E4M3").
//
// Plain values and free functions: no state, safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace xserv::safetensors {

// Sub-byte types of the format (F4, F6_*) are deliberately absent: a tensor of those has no
// whole-byte element size, and no model we serve stores them; they are refused at load.
enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP E4M3 "fn" variant: no infinities, NaN = 0x7F / 0xFF, max 448
  kF8E5M2,
  kF8E8M0,  // exponent-only scales (MX formats)
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
};

inline constexpr std::array kAllDTypes{
    DType::kF64,    DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
    DType::kF8E8M0, DType::kI64, DType::kI32, DType::kI16,  DType::kI8,     DType::kU64,
    DType::kU32,    DType::kU16, DType::kU8,  DType::kBool};

// Bytes per element (1, 2, 4 or 8).
size_t DTypeSize(DType dtype);

// The format's spelling, e.g. "BF16", "F8_E4M3", "BOOL".
std::string_view DTypeName(DType dtype);

// Inverse of DTypeName (exact, case-sensitive, as the reference implementation). An unknown
// string is InvalidArgument listing the supported names.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace xserv::safetensors
