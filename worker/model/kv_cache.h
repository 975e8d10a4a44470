// KvCache: the physical paged KV storage of one model on one backend, one K and one V pool per
// layer, each [num_blocks, block_size, num_kv_heads, head_dim]. Which block belongs to which
// sequence is decided by the scheduler's block manager (worker/engine); this class only owns the
// memory. Owned by the worker's engine loop; the backend must outlive it.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config/model_config.h"
#include "kernels/backend.h"

namespace xserv::model {

class KvCache {
 public:
  static absl::StatusOr<KvCache> Allocate(kernels::Backend& backend, const ModelConfig& config,
                                          int64_t num_blocks, int64_t block_size);

  // Bytes one block takes across all layers (K and V) in `dtype`.
  static int64_t BytesPerBlock(const ModelConfig& config, int64_t block_size, kernels::DType dtype);

  const std::vector<kernels::KvLayer>& layers() const { return layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

 private:
  std::vector<kernels::Buffer> buffers_;  // K and V of every layer
  std::vector<kernels::KvLayer> layers_;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace xserv::model
