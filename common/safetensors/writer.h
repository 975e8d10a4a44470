// Writing safetensors files that HF's `safetensors` library reads, single or sharded.
//
// Free functions; each call writes its own files and touches no shared state, so calls on
// different paths may run concurrently. Used by the model-maker tool and by tests.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/safetensors/tensor_view.h"

namespace xserv::safetensors {

// Writes `tensors` contiguously in the given order after a compact JSON header padded with
// spaces to a multiple of 8 bytes (so the data section starts 8-aligned, as the reference
// writer does). Each tensor's data must be exactly its shape's byte size; names must be unique,
// non-empty and not "__metadata__". `metadata` becomes "__metadata__" when non-empty. The file
// is written to `path`.tmp and renamed, so readers never see a half-written file.
absl::Status WriteSafetensors(const std::string& path, std::span<const TensorView> tensors,
                              const std::map<std::string, std::string>& metadata = {});

struct ShardedWriteOptions {
  // A shard is closed before a tensor that would push it past this size; a single larger
  // tensor gets a shard of its own.
  uint64_t max_shard_bytes = 5ull << 30;
  std::string prefix = "model";  // shards are <prefix>-00001-of-0000N.safetensors
};

// Writes `tensors` (in order) into shards under `dir` plus model.safetensors.index.json with
// metadata.total_size and the weight_map, as transformers' save_pretrained lays them out.
// `metadata` goes into every shard. Returns the shard file names in order.
absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, std::span<const TensorView> tensors,
    const std::map<std::string, std::string>& metadata = {},
    const ShardedWriteOptions& options = {});

}  // namespace xserv::safetensors
