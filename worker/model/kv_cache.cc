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
  const int64_t per_head = layout.fp8 ? c.head_dim + static_cast<int64_t>(sizeof(float))
                                      : c.head_dim * static_cast<int64_t>(kernels::DTypeSize(dtype));
  return 2 * NumStorages(c, layout) * block_size * c.num_kv_heads * per_head;
}

absl::Status KvCache::AddPool(kernels::DType dtype, const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(kernels::Buffer device, backend_->Allocate(dtype, shape));
  Pool pool;
  pool.block_bytes = device.view().nbytes() / static_cast<size_t>(shape[0]);
  if (num_host_blocks_ > 0) pool.host.reset(new std::byte[pool.block_bytes * num_host_blocks_]);
  pool.device = std::move(device);
  pools_.push_back(std::move(pool));
  return absl::OkStatus();
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
  const kernels::DType dtype = layout.fp8 ? kernels::DType::kF8E4M3 : backend.compute_dtype();
  const std::vector<int64_t> storage_of_layers = StorageOfLayers(c, layout);
  const int64_t storages = CountStorages(storage_of_layers);
  const int tensors_per_storage = layout.fp8 ? 4 : 2;  // K, V (, their scales)
  for (int64_t l = 0; l < storages; ++l) {
    for (int i = 0; i < 2; ++i) {
      RETURN_IF_ERROR(cache.AddPool(dtype, {num_blocks, block_size, c.num_kv_heads, c.head_dim}));
    }
    if (layout.fp8) {
      for (int i = 0; i < 2; ++i) {
        RETURN_IF_ERROR(
            cache.AddPool(kernels::DType::kF32, {num_blocks, block_size, c.num_kv_heads}));
      }
    }
  }
  std::vector<kernels::KvLayer> storage_views;
  for (int64_t l = 0; l < storages; ++l) {
    const Pool* p = &cache.pools_[l * tensors_per_storage];
    kernels::KvLayer view{.k = p[0].device.view(), .v = p[1].device.view()};
    if (layout.fp8) {
      view.k_scale = p[2].device.view();
      view.v_scale = p[3].device.view();
    }
    storage_views.push_back(view);
  }
  for (const int64_t storage : storage_of_layers) {
    cache.layers_.push_back(storage_views[storage]);
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
    for (const Pool& pool : pools_) {
      RETURN_IF_ERROR(backend_->CopyToHost(pool.device.view().SliceRows(pair.first, pair.first + 1),
                                           pool.host.get() + pair.second * pool.block_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::SwapIn(std::span<const BlockPair> pairs) {
  for (const BlockPair& pair : pairs) {
    RETURN_IF_ERROR(CheckPair(pair, num_host_blocks_, num_blocks_));
    for (const Pool& pool : pools_) {
      RETURN_IF_ERROR(
          backend_->CopyFromHost(pool.host.get() + pair.first * pool.block_bytes,
                                 pool.device.view().SliceRows(pair.second, pair.second + 1)));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::CopyBlocks(std::span<const BlockPair> pairs) {
  for (const BlockPair& pair : pairs) {
    RETURN_IF_ERROR(CheckPair(pair, num_blocks_, num_blocks_));
    for (const Pool& pool : pools_) {
      const kernels::Tensor t = pool.device.view();
      RETURN_IF_ERROR(backend_->Convert(t.SliceRows(pair.first, pair.first + 1),
                                        t.SliceRows(pair.second, pair.second + 1)));
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::model
