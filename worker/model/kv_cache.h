// KvCache: the physical paged KV storage of one model on one backend, one K and one V pool per
// layer, each [num_blocks, block_size, num_kv_heads, head_dim], plus an optional host swap pool
// of the same block shape for preemption by swap. With KvLayout::share_window_layers a
// sliding-window layer and a full layer share one K/V pair (see there). Which block belongs to which sequence is
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

// Which layers share storage.
struct KvLayout {
  // The k-th sliding-window layer and the k-th full layer share one K/V pair. Only sound with
  // window tables (BlockManagerConfig::window_tokens): a block id then belongs to a sequence's
  // full table or to its window table, never both, so it holds either the full layers' keys or
  // the sliding layers'. A block then costs half the layers of gpt-oss, and the pool doubles.
  bool share_window_layers = false;
  // The global index of the config's first layer (a pipeline stage's rank_config keeps the
  // global layer_types).
  int64_t first_layer = 0;
};

class KvCache {
 public:
  // `num_host_blocks` sizes the swap pool (0: no swapping).
  static absl::StatusOr<KvCache> Allocate(kernels::Backend& backend, const ModelConfig& config,
                                          int64_t num_blocks, int64_t block_size,
                                          int64_t num_host_blocks = 0,
                                          const KvLayout& layout = {});

  // The K/V pair each of the config's layers uses, and how many pairs there are.
  static std::vector<int64_t> StorageOfLayers(const ModelConfig& config, const KvLayout& layout);
  static int64_t NumStorages(const ModelConfig& config, const KvLayout& layout);

  using BlockPair = std::pair<int32_t, int32_t>;  // (src, dst)
  // Device block -> host block, host -> device, device -> device (copy-on-write), every layer.
  absl::Status SwapOut(std::span<const BlockPair> pairs);
  absl::Status SwapIn(std::span<const BlockPair> pairs);
  absl::Status CopyBlocks(std::span<const BlockPair> pairs);

  // Bytes one block takes across all K/V pairs in `dtype`.
  static int64_t BytesPerBlock(const ModelConfig& config, int64_t block_size, kernels::DType dtype,
                               const KvLayout& layout = {});

  const std::vector<kernels::KvLayer>& layers() const { return layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_host_blocks() const { return num_host_blocks_; }

 private:
  absl::Status CheckPair(const BlockPair& pair, int64_t src_limit, int64_t dst_limit) const;

  kernels::Backend* backend_ = nullptr;
  size_t block_bytes_ = 0;  // one block of one layer's K (or V)
  int64_t num_host_blocks_ = 0;
  // K and V of every storage pair, [host_blocks * block]; left uninitialised (only swapped-out
  // blocks are ever read back).
  std::vector<std::unique_ptr<std::byte[]>> host_;
  std::vector<kernels::Buffer> buffers_;    // K and V of every storage pair
  std::vector<kernels::KvLayer> storages_;  // views of buffers_, one per pair
  std::vector<kernels::KvLayer> layers_;    // one per layer: its storage pair
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace xserv::model
