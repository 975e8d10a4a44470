// DeviceBlockPool: the physical KV blocks of one device pool — reference counts, the list of
// empty blocks, the LRU of free blocks that still hold prefix-cached content, and the index from
// chain hash to cached block.
//
// Owned by BlockManager and, like it, used only by the engine-loop thread. No sequence
// bookkeeping lives here: BlockManager owns block tables and tells the pool when a table takes
// or drops a reference.
//
// A block is in exactly one of three places:
//   in use     ref > 0 (cached or not);
//   evictable  ref == 0, cached: linked in the LRU, reused on a prefix hit, evicted on demand;
//   empty      ref == 0, not cached: on the empty list, allocated first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace xserv::engine {

using BlockId = int32_t;

class DeviceBlockPool {
 public:
  DeviceBlockPool(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks an allocation can take now: empty plus evictable.
  int32_t NumAllocatable() const { return static_cast<int32_t>(empty_.size()) + num_evictable_; }
  int32_t NumEvictable() const { return num_evictable_; }
  int32_t NumCached() const { return static_cast<int32_t>(index_.size()); }
  int32_t RefCount(BlockId block) const { return meta_[block].ref; }
  bool IsCached(BlockId block) const { return meta_[block].hash.has_value(); }
  uint64_t num_evictions() const { return num_evictions_; }

  // Returns a block with ref count 1: an empty one if any, else the least recently freed
  // evictable block, whose cache entry is dropped. Requires NumAllocatable() > 0.
  BlockId Allocate();
  // Adds a reference; an evictable block leaves the LRU.
  void Acquire(BlockId block);
  // Drops a reference; at zero the block becomes evictable (most recently used) if cached,
  // else empty.
  void Release(BlockId block);

  // The cached block holding `tokens` right after the block hashed `parent_hash`, or nullopt.
  // Stored tokens and parent hash are compared, so a hash collision is a miss.
  std::optional<BlockId> Lookup(uint64_t hash, uint64_t parent_hash,
                                std::span<const int32_t> tokens) const;
  // Records the in-use, full `block` as holding `tokens` under `hash`. Returns false and changes
  // nothing when `block` is already cached or another block holds `hash` (duplicate content
  // computed concurrently stays uncached and is simply freed later).
  bool Register(BlockId block, uint64_t hash, uint64_t parent_hash,
                std::span<const int32_t> tokens);

  // Checks ref counts against `expected_refs` (one entry per block, counted from the block
  // tables) and the consistency of the empty list, LRU and index.
  absl::Status CheckInvariants(std::span<const int32_t> expected_refs) const;

 private:
  struct BlockMeta {
    int32_t ref = 0;
    std::optional<uint64_t> hash;  // set while the block is in the prefix index
    uint64_t parent_hash = 0;      // valid while `hash` is set
    // Intrusive LRU links (kNil when unlinked); the head is the least recently freed.
    BlockId lru_prev = kNil;
    BlockId lru_next = kNil;
  };
  static constexpr BlockId kNil = -1;

  void LruPushBack(BlockId block);
  void LruRemove(BlockId block);
  void Uncache(BlockId block);

  int32_t block_size_;
  std::vector<BlockMeta> meta_;
  std::vector<int32_t> cached_tokens_;  // [num_blocks * block_size]; valid while cached
  std::vector<BlockId> empty_;          // stack: the back is allocated next
  BlockId lru_head_ = kNil;
  BlockId lru_tail_ = kNil;
  int32_t num_evictable_ = 0;
  uint64_t num_evictions_ = 0;
  absl::flat_hash_map<uint64_t, BlockId> index_;  // chain hash -> cached block
};

}  // namespace xserv::engine
