#include "worker/model/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::model {

int64_t KvCache::BytesPerBlock(const ModelConfig& c, int64_t block_size, kernels::DType dtype) {
  return 2 * c.num_layers * block_size * c.num_kv_heads * c.head_dim *
         static_cast<int64_t>(kernels::DTypeSize(dtype));
}

absl::StatusOr<KvCache> KvCache::Allocate(kernels::Backend& backend, const ModelConfig& c,
                                          int64_t num_blocks, int64_t block_size) {
  if (num_blocks < 1 || block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache needs at least one block of one token, got ", num_blocks,
                     " blocks of ", block_size));
  }
  KvCache cache;
  cache.num_blocks_ = num_blocks;
  cache.block_size_ = block_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ASSIGN_OR_RETURN(kernels::Buffer k, backend.Allocate(backend.compute_dtype(),
                                                         {num_blocks, block_size, c.num_kv_heads,
                                                          c.head_dim}));
    ASSIGN_OR_RETURN(kernels::Buffer v, backend.Allocate(backend.compute_dtype(),
                                                         {num_blocks, block_size, c.num_kv_heads,
                                                          c.head_dim}));
    cache.layers_.push_back({k.view(), v.view()});
    cache.buffers_.push_back(std::move(k));
    cache.buffers_.push_back(std::move(v));
  }
  return cache;
}

}  // namespace xserv::model
