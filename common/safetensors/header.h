// Parsing and strict validation of a safetensors file image (8-byte length, JSON header, data).
//
// Pure functions over caller-owned bytes, safe from any thread. This is the one place of the
// module where untrusted bytes are interpreted; SafetensorsFile maps a file and calls it, and the
// fuzz tests call it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/dtype.h"

namespace xserv::safetensors {

// The reference implementation refuses headers above 100 MB; so do we, before parsing.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

struct FileLayout {
  uint64_t data_start = 0;                      // 8 + header length
  std::vector<TensorEntry> tensors;             // sorted by begin (then end)
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// Validates `file_bytes` as a whole safetensors file, as the reference reader does:
// header length within the file and ≤ kMaxHeaderBytes; header a JSON object starting with '{';
// every tensor has a known dtype, a shape of non-negative integers and two integer
// data_offsets; end ≥ begin; end - begin == product(shape) × element size (overflow-checked);
// ranges neither overlap nor leave gaps, and cover the data section exactly; "__metadata__" is
// null or an object of strings. Errors are InvalidArgument (malformed header) or DataLoss (the
// file is shorter than it claims), prefixed with `label` (the path) and naming the tensor.
absl::StatusOr<FileLayout> ParseFileLayout(std::span<const std::byte> file_bytes,
                                           std::string_view label);

}  // namespace xserv::safetensors
