// The sharded-checkpoint index, `model.safetensors.index.json`:
//   {"metadata": {"total_size": N, ...}, "weight_map": {"tensor name": "shard file", ...}}
//
// Pure functions, safe from any thread; the module's JSON adapter for the index (no exception
// leaves them).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace xserv::safetensors {

inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
inline constexpr std::string_view kSingleFileName = "model.safetensors";

struct ShardIndex {
  std::optional<uint64_t> total_size;             // metadata.total_size when present
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file (relative)
};

// InvalidArgument prefixed with `label` for malformed JSON, a missing or non-object weight_map,
// a non-string shard name, or a shard name that is absolute or contains "..".
absl::StatusOr<ShardIndex> ParseShardIndex(std::string_view json_text, std::string_view label);

// Pretty-printed JSON (two-space indent, keys sorted, trailing newline) as transformers writes it.
absl::StatusOr<std::string> FormatShardIndex(const ShardIndex& index);

}  // namespace xserv::safetensors
