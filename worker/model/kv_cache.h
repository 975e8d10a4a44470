// KvCache: the physical paged KV storage of one model on one backend, one K and one V pool per
// layer, each [num_blocks, block_size, num_kv_heads, head_dim] (in the compute dtype, or FP8
// codes plus per (slot, kv head) scales: KvLayout::fp8), plus an optional host swap pool of the
// same block shape for preemption by swap. With KvLayout::share_window_layers a sliding-window
// layer and a full layer share one K/V pair (see there). Which block belongs to which sequence
// is decided by the scheduler's block manager (worker/engine); this class only owns the memory
// and moves blocks when told. Owned by the worker's engine loop; the backend must outlive it.
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

// How the KV is stored: its element type, and which layers share storage.
struct KvLayout {
  // FP8 E4M3 codes with an f32 scale per (slot, kv head) (kernels::KvLayer), instead of the
  // compute dtype: a bf16 cache's block in (head_dim + 4) / (2 * head_dim) of the bytes.
  bool fp8 = false;
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

  // Bytes one block takes across all K/V pairs, in `dtype` (the compute dtype) unless the layout
  // is FP8.
  static int64_t BytesPerBlock(const ModelConfig& config, int64_t block_size, kernels::DType dtype,
                               const KvLayout& layout = {});

  const std::vector<kernels::KvLayer>& layers() const { return layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_host_blocks() const { return num_host_blocks_; }

 private:
  absl::Status CheckPair(const BlockPair& pair, int64_t src_limit, int64_t dst_limit) const;

  // One device tensor whose rows are blocks (a storage pair's K, V, or with FP8 their scales)
  // and its host swap pool.
  struct Pool {
    kernels::Buffer device;  // [num_blocks, ...]
    size_t block_bytes = 0;  // one row
    // [host_blocks * block_bytes] (null without swap); left uninitialised (only swapped-out
    // blocks are ever read back).
    std::unique_ptr<std::byte[]> host;
  };
  absl::Status AddPool(kernels::DType dtype, const std::vector<int64_t>& shape);

  kernels::Backend* backend_ = nullptr;
  int64_t num_host_blocks_ = 0;
  std::vector<Pool> pools_;               // every tensor of every storage pair: what blocks move in
  std::vector<kernels::KvLayer> layers_;  // one per layer: views of its storage pair's pools
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace xserv::model
