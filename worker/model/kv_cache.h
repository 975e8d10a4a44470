// KvCache: the physical paged KV storage of one model on one backend, one K and one V pool per
// layer, each [num_blocks, block_size, num_kv_heads, head_dim], plus an optional host swap pool
// of the same block shape for preemption by swap. Which block belongs to which sequence is
// decided by the scheduler's block manager (worker/engine); this class only owns the memory and
// moves blocks when told. Owned by the worker's engine loop; the backend must outlive it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"
#include "kernels/backend.h"

namespace xserv::model {

class KvCache {
 public:
  // `num_host_blocks` sizes the swap pool (0: no swapping).
  static absl::StatusOr<KvCache> Allocate(kernels::Backend& backend, const ModelConfig& config,
                                          int64_t num_blocks, int64_t block_size,
                                          int64_t num_host_blocks = 0);

  using BlockPair = std::pair<int32_t, int32_t>;  // (src, dst)
  // Device block -> host block, host -> device, device -> device (copy-on-write), every layer.
  absl::Status SwapOut(std::span<const BlockPair> pairs);
  absl::Status SwapIn(std::span<const BlockPair> pairs);
  absl::Status CopyBlocks(std::span<const BlockPair> pairs);

  // Bytes one block takes across all layers (K and V) in `dtype`.
  static int64_t BytesPerBlock(const ModelConfig& config, int64_t block_size, kernels::DType dtype);

  const std::vector<kernels::KvLayer>& layers() const { return layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_host_blocks() const { return num_host_blocks_; }

 private:
  absl::Status CheckPair(const BlockPair& pair, int64_t src_limit, int64_t dst_limit) const;

  kernels::Backend* backend_ = nullptr;
  size_t block_bytes_ = 0;  // one block of one layer's K (or V)
  int64_t num_host_blocks_ = 0;
  // K and V of every layer, [host_blocks * block]; left uninitialised (only swapped-out blocks
  // are ever read back).
  std::vector<std::unique_ptr<std::byte[]>> host_;
  std::vector<kernels::Buffer> buffers_;  // K and V of every layer
  std::vector<kernels::KvLayer> layers_;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace xserv::model
