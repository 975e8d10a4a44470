#include "worker/engine/block_pool.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::engine {

DeviceBlockPool::DeviceBlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size),
      meta_(num_blocks),
      cached_tokens_(static_cast<size_t>(num_blocks) * block_size) {
  XSERV_CHECK(num_blocks >= 0 && block_size > 0);
  // Reverse order so that allocation hands out 0, 1, 2, ... on a fresh pool (readable tests).
  empty_.reserve(num_blocks);
  for (BlockId b = num_blocks - 1; b >= 0; --b) empty_.push_back(b);
}

BlockId DeviceBlockPool::Allocate() {
  BlockId block;
  if (!empty_.empty()) {
    block = empty_.back();
    empty_.pop_back();
  } else {
    XSERV_CHECK(lru_head_ != kNil);
    block = lru_head_;
    LruRemove(block);
    Uncache(block);
    ++num_evictions_;
  }
  XSERV_CHECK(meta_[block].ref == 0);
  meta_[block].ref = 1;
  return block;
}

void DeviceBlockPool::Acquire(BlockId block) {
  BlockMeta& m = meta_[block];
  if (m.ref == 0) {
    // Only cached blocks can be re-acquired from the free state: empty ones hold nothing.
    XSERV_CHECK(m.hash.has_value());
    LruRemove(block);
  }
  ++m.ref;
}

void DeviceBlockPool::Release(BlockId block) {
  BlockMeta& m = meta_[block];
  XSERV_CHECK(m.ref > 0);
  if (--m.ref > 0) return;
  if (m.hash.has_value()) {
    LruPushBack(block);
  } else {
    empty_.push_back(block);
  }
}

std::optional<BlockId> DeviceBlockPool::Lookup(uint64_t hash, uint64_t parent_hash,
                                               std::span<const int32_t> tokens) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const BlockId block = it->second;
  if (meta_[block].parent_hash != parent_hash ||
      static_cast<int32_t>(tokens.size()) != block_size_ ||
      !std::equal(tokens.begin(), tokens.end(),
                  cached_tokens_.begin() + static_cast<size_t>(block) * block_size_)) {
    return std::nullopt;  // hash collision: treat as a miss
  }
  return block;
}

bool DeviceBlockPool::Register(BlockId block, uint64_t hash, uint64_t parent_hash,
                               std::span<const int32_t> tokens) {
  BlockMeta& m = meta_[block];
  XSERV_CHECK(m.ref > 0 && static_cast<int32_t>(tokens.size()) == block_size_);
  if (m.hash.has_value() || index_.contains(hash)) return false;
  index_.emplace(hash, block);
  m.hash = hash;
  m.parent_hash = parent_hash;
  std::copy(tokens.begin(), tokens.end(),
            cached_tokens_.begin() + static_cast<size_t>(block) * block_size_);
  return true;
}

void DeviceBlockPool::LruPushBack(BlockId block) {
  BlockMeta& m = meta_[block];
  m.lru_prev = lru_tail_;
  m.lru_next = kNil;
  if (lru_tail_ != kNil) {
    meta_[lru_tail_].lru_next = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  ++num_evictable_;
}

void DeviceBlockPool::LruRemove(BlockId block) {
  BlockMeta& m = meta_[block];
  if (m.lru_prev != kNil) {
    meta_[m.lru_prev].lru_next = m.lru_next;
  } else {
    lru_head_ = m.lru_next;
  }
  if (m.lru_next != kNil) {
    meta_[m.lru_next].lru_prev = m.lru_prev;
  } else {
    lru_tail_ = m.lru_prev;
  }
  m.lru_prev = m.lru_next = kNil;
  --num_evictable_;
}

void DeviceBlockPool::Uncache(BlockId block) {
  BlockMeta& m = meta_[block];
  XSERV_CHECK(m.hash.has_value());
  index_.erase(*m.hash);
  m.hash.reset();
}

absl::Status DeviceBlockPool::CheckInvariants(std::span<const int32_t> expected_refs) const {
  const int32_t n = num_blocks();
  if (static_cast<int32_t>(expected_refs.size()) != n) {
    return absl::InternalError("expected_refs has the wrong size");
  }
  // 0 = unseen, 1 = empty list, 2 = LRU.
  std::vector<int8_t> where(n, 0);
  for (BlockId b : empty_) {
    if (b < 0 || b >= n || where[b] != 0) {
      return absl::InternalError(absl::StrCat("block ", b, " listed twice or out of range"));
    }
    where[b] = 1;
  }
  int32_t lru_count = 0;
  for (BlockId b = lru_head_, prev = kNil; b != kNil; prev = b, b = meta_[b].lru_next) {
    if (b < 0 || b >= n || where[b] != 0 || meta_[b].lru_prev != prev) {
      return absl::InternalError(absl::StrCat("LRU corrupt at block ", b));
    }
    where[b] = 2;
    ++lru_count;
  }
  if (lru_count != num_evictable_) return absl::InternalError("LRU length != num_evictable");
  for (BlockId b = 0; b < n; ++b) {
    const BlockMeta& m = meta_[b];
    if (m.ref != expected_refs[b]) {
      return absl::InternalError(
          absl::StrCat("block ", b, " ref ", m.ref, " but tables hold ", expected_refs[b]));
    }
    const bool cached = m.hash.has_value();
    if (m.ref > 0 && where[b] != 0) {
      return absl::InternalError(absl::StrCat("in-use block ", b, " is on a free list"));
    }
    if (m.ref == 0 && where[b] != (cached ? 2 : 1)) {
      return absl::InternalError(absl::StrCat("free block ", b, " leaked (cached=", cached, ")"));
    }
    if (cached) {
      auto it = index_.find(*m.hash);
      if (it == index_.end() || it->second != b) {
        return absl::InternalError(absl::StrCat("cached block ", b, " missing from the index"));
      }
    }
  }
  for (const auto& [hash, block] : index_) {
    if (block < 0 || block >= n || meta_[block].hash != hash) {
      return absl::InternalError(absl::StrCat("index entry points at block ", block));
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::engine
