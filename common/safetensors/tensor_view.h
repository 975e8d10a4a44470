// A tensor as stored in a safetensors file: name, dtype, shape and a span of its bytes.
//
// A TensorView owns its name and shape but not its data: `data` points into the memory mapping
// of the SafetensorsFile (or into a caller's buffer when writing) and is valid only while that
// owner lives. Read-only, so any number of threads may read one concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/dtype.h"

namespace xserv::safetensors {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  // Little-endian elements, row-major. Not necessarily aligned to the element size: files
  // written by other tools may place a 2-byte tensor at an odd offset. Copy or check before
  // reinterpreting.
  std::span<const std::byte> data;

  // Product of the dims (1 for a scalar). Only meaningful for a validated view, whose
  // product is known not to overflow.
  int64_t NumElements() const;
};

// Bytes that `shape` of `dtype` occupies, or InvalidArgument when a dim is negative or the
// product overflows int64 (hostile headers can claim any shape).
absl::StatusOr<uint64_t> CheckedByteSize(DType dtype, std::span<const int64_t> shape);

}  // namespace xserv::safetensors
