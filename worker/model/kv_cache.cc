#include "worker/model/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::model {

std::vector<int64_t> KvCache::StorageOfLayers(const ModelConfig& c, const KvLayout& layout) {
  std::vector<int64_t> storage(static_cast<size_t>(c.num_layers));
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!layout.share_window_layers) {
      storage[l] = l;
    } else if (c.SlidingWindowForLayer(layout.first_layer + l) > 0) {
      storage[l] = sliding++;
    } else {
      storage[l] = full++;
    }
  }
  return storage;
}

namespace {

int64_t CountStorages(const std::vector<int64_t>& storage_of_layers) {
  return storage_of_layers.empty()
             ? 0
             : *std::max_element(storage_of_layers.begin(), storage_of_layers.end()) + 1;
}

}  // namespace

int64_t KvCache::NumStorages(const ModelConfig& c, const KvLayout& layout) {
  return CountStorages(StorageOfLayers(c, layout));
}

int64_t KvCache::BytesPerBlock(const ModelConfig& c, int64_t block_size, kernels::DType dtype,
                               const KvLayout& layout) {
  return 2 * NumStorages(c, layout) * block_size * c.num_kv_heads * c.head_dim *
         static_cast<int64_t>(kernels::DTypeSize(dtype));
}

absl::StatusOr<KvCache> KvCache::Allocate(kernels::Backend& backend, const ModelConfig& c,
                                          int64_t num_blocks, int64_t block_size,
                                          int64_t num_host_blocks, const KvLayout& layout) {
  if (num_blocks < 1 || block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache needs at least one block of one token, got ", num_blocks,
                     " blocks of ", block_size));
  }
  if (layout.share_window_layers &&
      layout.first_layer + c.num_layers > static_cast<int64_t>(c.layer_types.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: layers ", layout.first_layer, "..", layout.first_layer + c.num_layers - 1,
        " outside the model's ", c.layer_types.size(), " layer types"));
  }
  KvCache cache;
  cache.backend_ = &backend;
  cache.num_blocks_ = num_blocks;
  cache.block_size_ = block_size;
  cache.num_host_blocks_ = std::max<int64_t>(0, num_host_blocks);
  cache.block_bytes_ = static_cast<size_t>(block_size * c.num_kv_heads * c.head_dim) *
                       kernels::DTypeSize(backend.compute_dtype());
  const std::vector<int64_t> storage_of_layers = StorageOfLayers(c, layout);
  const int64_t storages = CountStorages(storage_of_layers);
  for (int64_t l = 0; l < storages; ++l) {
    ASSIGN_OR_RETURN(kernels::Buffer k, backend.Allocate(backend.compute_dtype(),
                                                         {num_blocks, block_size, c.num_kv_heads,
                                                          c.head_dim}));
    ASSIGN_OR_RETURN(kernels::Buffer v, backend.Allocate(backend.compute_dtype(),
                                                         {num_blocks, block_size, c.num_kv_heads,
                                                          c.head_dim}));
    cache.storages_.push_back({k.view(), v.view()});
    cache.buffers_.push_back(std::move(k));
    cache.buffers_.push_back(std::move(v));
    if (cache.num_host_blocks_ > 0) {
      for (int i = 0; i < 2; ++i) {
        cache.host_.emplace_back(new std::byte[cache.block_bytes_ * cache.num_host_blocks_]);
      }
    }
  }
  for (const int64_t storage : storage_of_layers) {
    cache.layers_.push_back(cache.storages_[storage]);
  }
  return cache;
}

absl::Status KvCache::CheckPair(const BlockPair& pair, int64_t src_limit,
                                int64_t dst_limit) const {
  if (pair.first < 0 || pair.first >= src_limit || pair.second < 0 || pair.second >= dst_limit) {
    return absl::InvalidArgumentError(absl::StrCat("KV block move ", pair.first, " -> ",
                                                   pair.second, " outside the pools"));
  }
  return absl::OkStatus();
}

absl::Status KvCache::SwapOut(std::span<const BlockPair> pairs) {
  for (const BlockPair& pair : pairs) {
    RETURN_IF_ERROR(CheckPair(pair, num_blocks_, num_host_blocks_));
    for (size_t l = 0; l < storages_.size(); ++l) {
      const kernels::KvLayer& layer = storages_[l];
      RETURN_IF_ERROR(backend_->CopyToHost(layer.k.SliceRows(pair.first, pair.first + 1),
                                           host_[2 * l].get() + pair.second * block_bytes_));
      RETURN_IF_ERROR(backend_->CopyToHost(layer.v.SliceRows(pair.first, pair.first + 1),
                                           host_[2 * l + 1].get() + pair.second * block_bytes_));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::SwapIn(std::span<const BlockPair> pairs) {
  for (const BlockPair& pair : pairs) {
    RETURN_IF_ERROR(CheckPair(pair, num_host_blocks_, num_blocks_));
    for (size_t l = 0; l < storages_.size(); ++l) {
      const kernels::KvLayer& layer = storages_[l];
      RETURN_IF_ERROR(backend_->CopyFromHost(host_[2 * l].get() + pair.first * block_bytes_,
                                             layer.k.SliceRows(pair.second, pair.second + 1)));
      RETURN_IF_ERROR(backend_->CopyFromHost(host_[2 * l + 1].get() + pair.first * block_bytes_,
                                             layer.v.SliceRows(pair.second, pair.second + 1)));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::CopyBlocks(std::span<const BlockPair> pairs) {
  for (const BlockPair& pair : pairs) {
    RETURN_IF_ERROR(CheckPair(pair, num_blocks_, num_blocks_));
    for (const kernels::KvLayer& layer : storages_) {
      RETURN_IF_ERROR(backend_->Convert(layer.k.SliceRows(pair.first, pair.first + 1),
                                        layer.k.SliceRows(pair.second, pair.second + 1)));
      RETURN_IF_ERROR(backend_->Convert(layer.v.SliceRows(pair.first, pair.first + 1),
                                        layer.v.SliceRows(pair.second, pair.second + 1)));
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::model
