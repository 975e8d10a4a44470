// BlockManager: paged KV bookkeeping for the scheduler — one device block pool with prefix
// caching (block_pool.h), a host swap pool, and one block table per sequence.
//
// Owned by the Scheduler and called only from the engine-loop thread; it is not synchronised.
// It never touches memory: operations that move KV data return copy ops (BlockCopy, BlockSwap)
// that the model runner executes before the step's forward pass.
//
// Rules it keeps:
//  * Only full blocks whose tokens are all computed are cached (chain hash, see block_hash.h).
//    A sequence only writes at positions >= its computed count, so it never writes into a
//    cached block; a prefix hit is capped at tokens.size() - 1 so the last prompt token is
//    always computed (its logits are needed) into a block the sequence owns.
//  * A block with ref count > 1 is never written: AllocateSlots copies it first
//    (copy-on-write). Sharing of partial blocks only arises through Fork().
//  * A sequence's blocks live either all on the device or all on the host (swapped out).
//  * With a window (window_tokens > 0, models with sliding-window layers) a sequence has a
//    second table, for those layers' KV, drawn from the same pool (the KV cache gives a block id
//    the memory of one full layer and one window layer alike). Once every later query is past
//    them, its blocks are released (ReleaseOutsideWindow) and their entries read
//    kReleasedBlock; the kernels start at the window's first key and never read them. Prefix
//    caching is off with a window (a cached prefix would need its window blocks too).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "worker/engine/block_pool.h"

namespace xserv::engine {

using SeqId = uint64_t;

struct BlockManagerConfig {
  int32_t num_device_blocks = 0;
  int32_t block_size = 16;      // tokens per block
  int32_t num_host_blocks = 0;  // swap pool; 0 turns swapping off
  bool enable_prefix_caching = true;
  // > 0: sliding-window layers see the last window_tokens keys; sequences get a window table
  // (see the file comment). Needs enable_prefix_caching false.
  int32_t window_tokens = 0;

  absl::Status Validate() const;
};

// Device-to-device copy (copy-on-write): the engine copies block `src` to block `dst`.
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

// Swap-out: device block `src` -> host block `dst`. Swap-in: host `src` -> device `dst`.
struct BlockSwap {
  BlockId src = 0;
  BlockId dst = 0;
  bool operator==(const BlockSwap&) const = default;
};

// Result of a prefix-cache lookup, consumed by AllocateSequence right away (any pool change in
// between invalidates it).
struct PrefixMatch {
  std::vector<BlockId> blocks;   // cached full blocks covering the prefix, in order
  std::vector<uint64_t> hashes;  // their chain hashes
  int32_t num_tokens = 0;        // blocks.size() * block_size
  int32_t num_evictable = 0;     // matched blocks that are free now: taking them uses up pool
};

struct BlockManagerStats {
  int32_t num_device_blocks = 0;
  int32_t num_free_device_blocks = 0;  // empty + evictable
  int32_t num_used_device_blocks = 0;  // ref count > 0
  int32_t num_cached_blocks = 0;       // in the prefix index, used or evictable
  int32_t num_evictable_blocks = 0;
  int32_t num_host_blocks = 0;
  int32_t num_free_host_blocks = 0;
  uint64_t prefix_query_tokens = 0;  // prompt tokens looked up at admission
  uint64_t prefix_hit_tokens = 0;    // of those, found in cached blocks
  uint64_t num_evictions = 0;
  uint64_t num_cow_copies = 0;

  float DeviceUsage() const {
    return num_device_blocks == 0 ? 0.f
                                  : static_cast<float>(num_used_device_blocks) / num_device_blocks;
  }
};

// A window table's entry for a block no query will read again.
inline constexpr BlockId kReleasedBlock = -1;

class BlockManager {
 public:
  explicit BlockManager(const BlockManagerConfig& config);  // config must Validate()

  int32_t block_size() const { return block_size_; }
  int32_t num_device_blocks() const { return device_.num_blocks(); }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  int32_t BlocksFor(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }
  // Device blocks an allocation may take now (empty + evictable).
  int32_t NumFreeDeviceBlocks() const { return device_.NumAllocatable(); }
  int32_t NumFreeHostBlocks() const { return static_cast<int32_t>(host_free_.size()); }

  // Longest run of cached full blocks that prefixes `tokens`, capped at tokens.size() - 1
  // tokens. Read-only; empty when prefix caching is off.
  PrefixMatch FindCachedPrefix(std::span<const int32_t> tokens) const;

  // Creates `seq`'s table from `match` (ref counts taken) plus fresh blocks so that it covers
  // `num_slots` tokens (>= match.num_tokens). `tokens` is the sequence's prompt as looked up;
  // it feeds the prefix statistics when `count_prefix_query`. ResourceExhausted without side
  // effects if the pool is short.
  absl::Status AllocateSequence(SeqId seq, std::span<const int32_t> tokens,
                                const PrefixMatch& match, int32_t num_slots,
                                bool count_prefix_query);

  // Device blocks that AllocateSlots(seq, num_computed, num_slots) would take, copies included.
  int32_t NumBlocksNeeded(SeqId seq, int32_t num_computed, int32_t num_slots) const;
  // Largest n <= max_new_tokens such that writing tokens [num_computed, num_computed + n)
  // needs at most NumFreeDeviceBlocks() new blocks.
  int32_t MaxAppendableTokens(SeqId seq, int32_t num_computed, int32_t max_new_tokens) const;
  // Grows `seq`'s device table to cover `num_slots` tokens and makes every block that tokens
  // [num_computed, num_slots) land in exclusively owned, appending a copy op to `copies` for
  // each shared block replaced. ResourceExhausted without side effects if the pool is short.
  absl::Status AllocateSlots(SeqId seq, int32_t num_computed, int32_t num_slots,
                             std::vector<BlockCopy>* copies);

  // Caches the full blocks among `seq`'s first `num_computed` tokens (`tokens` is the whole
  // sequence). Call once their KV has been written. No-op when prefix caching is off.
  void CommitComputed(SeqId seq, std::span<const int32_t> tokens, int32_t num_computed);

  // With a window: releases the window-table blocks wholly before the window of a query at
  // position `num_computed` (every later query's window starts there or later). Call once the
  // sequence's first `num_computed` tokens are computed. No-op without a window.
  void ReleaseOutsideWindow(SeqId seq, int32_t num_computed);

  // Shares every block of device-resident `parent` with the new sequence `child` (parallel
  // sampling). The first append into a shared partial block copies it.
  absl::Status Fork(SeqId parent, SeqId child);

  bool CanSwapOut(SeqId seq) const;
  // Moves `seq`'s blocks to the host pool, appending device->host ops. Device blocks are
  // released (cached ones stay reusable until evicted).
  absl::Status SwapOut(SeqId seq, std::vector<BlockSwap>* ops);
  // True if swapping in leaves `extra_blocks` more device blocks allocatable afterwards.
  bool CanSwapIn(SeqId seq, int32_t extra_blocks) const;
  absl::Status SwapIn(SeqId seq, std::vector<BlockSwap>* ops);

  // Releases every block of `seq` (device or host) and forgets it. Unknown ids are a no-op so
  // that abort paths need no bookkeeping of their own.
  void Free(SeqId seq);

  bool HasSequence(SeqId seq) const { return seqs_.contains(seq); }
  bool IsSwappedOut(SeqId seq) const;
  // Device or host block ids, depending on where the sequence lives. Empty if unknown.
  std::span<const BlockId> BlockTable(SeqId seq) const;
  // The window table (same length as BlockTable, released entries kReleasedBlock); empty
  // without a window.
  std::span<const BlockId> WindowTable(SeqId seq) const;
  int32_t window_tokens() const { return window_tokens_; }
  // Tables per sequence: 2 with a window, else 1. Every block of positions costs one block in
  // each.
  int NumTables() const { return window_tokens_ > 0 ? 2 : 1; }
  // The most device blocks a sequence of `num_tokens` holds at once when it computes at most
  // `max_chunk` tokens per step: its full table, plus with a window the window's blocks and a
  // chunk's.
  int32_t MaxBlocksHeld(int64_t num_tokens, int32_t max_chunk) const;
  int32_t RefCount(BlockId device_block) const { return device_.RefCount(device_block); }
  bool IsCached(BlockId device_block) const { return device_.IsCached(device_block); }
  int32_t NumSequences() const { return static_cast<int32_t>(seqs_.size()); }

  BlockManagerStats Stats() const;
  // No leaks, ref counts equal table references, host blocks owned once, free lists sane.
  absl::Status CheckInvariants() const;

 private:
  enum class Location : uint8_t { kDevice, kHost };
  struct SeqBlocks {
    Location location = Location::kDevice;
    std::vector<BlockId> table;
    std::vector<BlockId> window;   // with a window: the window table, else empty
    std::vector<uint64_t> hashes;  // chain hashes of the leading full computed blocks
  };
  // Table t of `s`: 0 the full one, 1 the window one (with a window).
  static std::vector<BlockId>& Table(SeqBlocks& s, int t) { return t == 0 ? s.table : s.window; }
  static const std::vector<BlockId>& Table(const SeqBlocks& s, int t) {
    return t == 0 ? s.table : s.window;
  }
  // Entries of `s`'s tables that hold a block (released window entries do not).
  int32_t NumHeld(const SeqBlocks& s) const;

  SeqBlocks& Get(SeqId seq);
  const SeqBlocks& Get(SeqId seq) const;
  void ReleaseTable(const std::vector<BlockId>& table);  // last block first, see .cc

  int32_t block_size_;
  bool enable_prefix_caching_;
  int32_t window_tokens_;
  DeviceBlockPool device_;
  int32_t num_host_blocks_;
  std::vector<BlockId> host_free_;  // stack
  absl::flat_hash_map<SeqId, SeqBlocks> seqs_;
  uint64_t prefix_query_tokens_ = 0;
  uint64_t prefix_hit_tokens_ = 0;
  uint64_t num_cow_copies_ = 0;
};

}  // namespace xserv::engine
