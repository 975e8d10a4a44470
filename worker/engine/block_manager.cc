#include "worker/engine/block_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/engine/block_hash.h"

namespace xserv::engine {

absl::Status BlockManagerConfig::Validate() const {
  if (num_device_blocks < 1) return absl::InvalidArgumentError("num_device_blocks must be >= 1");
  if (block_size < 1) return absl::InvalidArgumentError("block_size must be >= 1");
  if (num_host_blocks < 0) return absl::InvalidArgumentError("num_host_blocks must be >= 0");
  if (window_tokens < 0) return absl::InvalidArgumentError("window_tokens must be >= 0");
  if (window_tokens > 0 && enable_prefix_caching) {
    return absl::InvalidArgumentError("prefix caching does not support a window table");
  }
  return absl::OkStatus();
}

BlockManager::BlockManager(const BlockManagerConfig& config)
    : block_size_(config.block_size),
      enable_prefix_caching_(config.enable_prefix_caching),
      window_tokens_(config.window_tokens),
      device_(config.num_device_blocks, config.block_size),
      num_host_blocks_(config.num_host_blocks) {
  XSERV_CHECK(config.Validate().ok());
  host_free_.reserve(num_host_blocks_);
  for (BlockId b = num_host_blocks_ - 1; b >= 0; --b) host_free_.push_back(b);
}

BlockManager::SeqBlocks& BlockManager::Get(SeqId seq) {
  auto it = seqs_.find(seq);
  XSERV_CHECK(it != seqs_.end());
  return it->second;
}

const BlockManager::SeqBlocks& BlockManager::Get(SeqId seq) const {
  auto it = seqs_.find(seq);
  XSERV_CHECK(it != seqs_.end());
  return it->second;
}

PrefixMatch BlockManager::FindCachedPrefix(std::span<const int32_t> tokens) const {
  PrefixMatch match;
  if (!enable_prefix_caching_ || tokens.empty()) return match;
  // Keep at least one token uncached: the step that computes it yields the first logits.
  const size_t max_blocks = (tokens.size() - 1) / block_size_;
  uint64_t parent = kRootBlockHash;
  for (size_t i = 0; i < max_blocks; ++i) {
    auto block_tokens = tokens.subspan(i * block_size_, block_size_);
    const uint64_t hash = ChainBlockHash(parent, block_tokens);
    std::optional<BlockId> block = device_.Lookup(hash, parent, block_tokens);
    if (!block.has_value()) break;
    match.blocks.push_back(*block);
    match.hashes.push_back(hash);
    if (device_.RefCount(*block) == 0) ++match.num_evictable;
    parent = hash;
  }
  match.num_tokens = static_cast<int32_t>(match.blocks.size()) * block_size_;
  return match;
}

absl::Status BlockManager::AllocateSequence(SeqId seq, std::span<const int32_t> tokens,
                                            const PrefixMatch& match, int32_t num_slots,
                                            bool count_prefix_query) {
  XSERV_CHECK(!seqs_.contains(seq));
  XSERV_CHECK(num_slots >= match.num_tokens);
  const int32_t num_fresh = BlocksFor(num_slots) - static_cast<int32_t>(match.blocks.size());
  // A window table covers the same positions (no prefix hits with a window).
  const int32_t num_window = NumTables() == 2 ? BlocksFor(num_slots) : 0;
  if (num_fresh + num_window + match.num_evictable > device_.NumAllocatable()) {
    return absl::ResourceExhaustedError("not enough free KV blocks");
  }
  SeqBlocks& s = seqs_[seq];
  s.table.reserve(BlocksFor(num_slots));
  // Acquire the hits before allocating, so that allocation cannot evict them.
  for (BlockId b : match.blocks) {
    device_.Acquire(b);
    s.table.push_back(b);
  }
  s.hashes = match.hashes;
  for (int32_t i = 0; i < num_fresh; ++i) s.table.push_back(device_.Allocate());
  for (int32_t i = 0; i < num_window; ++i) s.window.push_back(device_.Allocate());
  if (count_prefix_query) {
    prefix_query_tokens_ += tokens.size();
    prefix_hit_tokens_ += match.num_tokens;
  }
  return absl::OkStatus();
}

int32_t BlockManager::NumBlocksNeeded(SeqId seq, int32_t num_computed, int32_t num_slots) const {
  const SeqBlocks& s = Get(seq);
  XSERV_CHECK(s.location == Location::kDevice);
  const int32_t end = BlocksFor(num_slots);
  int32_t needed = 0;
  for (int t = 0; t < NumTables(); ++t) {
    const std::vector<BlockId>& table = Table(s, t);
    const int32_t num_existing = static_cast<int32_t>(table.size());
    needed += std::max(0, end - num_existing);
    // Entries from num_computed / block_size on are never released (the window of a query at
    // num_computed starts at or before its block).
    for (int32_t j = num_computed / block_size_; j < std::min(num_existing, end); ++j) {
      if (device_.RefCount(table[j]) > 1) ++needed;
    }
  }
  return needed;
}

int32_t BlockManager::MaxAppendableTokens(SeqId seq, int32_t num_computed,
                                          int32_t max_new_tokens) const {
  const SeqBlocks& s = Get(seq);
  XSERV_CHECK(s.location == Location::kDevice);
  const int32_t free_blocks = device_.NumAllocatable();
  int32_t cost = 0;
  for (int32_t j = num_computed / block_size_;; ++j) {
    int32_t blocks = 0;  // new blocks (fresh or copies) that writing into block j takes
    for (int t = 0; t < NumTables(); ++t) {
      const std::vector<BlockId>& table = Table(s, t);
      if (j >= static_cast<int32_t>(table.size()) || device_.RefCount(table[j]) > 1) ++blocks;
    }
    cost += blocks;
    if (blocks > 0 && cost > free_blocks) {
      return std::clamp(j * block_size_ - num_computed, 0, max_new_tokens);
    }
    if ((j + 1) * block_size_ - num_computed >= max_new_tokens) return max_new_tokens;
  }
}

absl::Status BlockManager::AllocateSlots(SeqId seq, int32_t num_computed, int32_t num_slots,
                                         std::vector<BlockCopy>* copies) {
  if (NumBlocksNeeded(seq, num_computed, num_slots) > device_.NumAllocatable()) {
    return absl::ResourceExhaustedError("not enough free KV blocks");
  }
  SeqBlocks& s = Get(seq);
  const int32_t end = BlocksFor(num_slots);
  for (int t = 0; t < NumTables(); ++t) {
    std::vector<BlockId>& table = Table(s, t);
    const int32_t num_existing = static_cast<int32_t>(table.size());
    for (int32_t j = num_computed / block_size_; j < std::min(num_existing, end); ++j) {
      const BlockId shared = table[j];
      if (device_.RefCount(shared) == 1) continue;
      // Another sequence reads this block: write into a private copy instead.
      const BlockId copy = device_.Allocate();
      copies->push_back({.src = shared, .dst = copy});
      device_.Release(shared);
      table[j] = copy;
      ++num_cow_copies_;
    }
    while (static_cast<int32_t>(table.size()) < end) table.push_back(device_.Allocate());
  }
  return absl::OkStatus();
}

void BlockManager::CommitComputed(SeqId seq, std::span<const int32_t> tokens,
                                  int32_t num_computed) {
  if (!enable_prefix_caching_) return;
  SeqBlocks& s = Get(seq);
  XSERV_CHECK(s.location == Location::kDevice);
  XSERV_CHECK(num_computed <= static_cast<int32_t>(tokens.size()));
  const size_t num_full = std::min(static_cast<size_t>(num_computed / block_size_), s.table.size());
  for (size_t i = s.hashes.size(); i < num_full; ++i) {
    const uint64_t parent = i == 0 ? kRootBlockHash : s.hashes[i - 1];
    auto block_tokens = tokens.subspan(i * block_size_, block_size_);
    const uint64_t hash = ChainBlockHash(parent, block_tokens);
    s.hashes.push_back(hash);
    device_.Register(s.table[i], hash, parent, block_tokens);
  }
}

void BlockManager::ReleaseOutsideWindow(SeqId seq, int32_t num_computed) {
  if (window_tokens_ == 0) return;
  SeqBlocks& s = Get(seq);
  XSERV_CHECK(s.location == Location::kDevice);
  // A query at num_computed or later reads keys from num_computed - window + 1 on.
  const int32_t first_key = std::max(0, num_computed - window_tokens_ + 1);
  const int32_t first_block =
      std::min(first_key / block_size_, static_cast<int32_t>(s.window.size()));
  for (int32_t j = 0; j < first_block; ++j) {
    if (s.window[j] == kReleasedBlock) continue;
    device_.Release(s.window[j]);
    s.window[j] = kReleasedBlock;
  }
}

int32_t BlockManager::MaxBlocksHeld(int64_t num_tokens, int32_t max_chunk) const {
  const int32_t full = BlocksFor(num_tokens);
  if (window_tokens_ == 0) return full;
  // A chunk [s, e) reads keys from s - window + 1 on: at most window + chunk - 1 positions,
  // spread over one block more than they fill.
  return full + std::min(full, BlocksFor(int64_t{window_tokens_} + max_chunk - 1) + 1);
}

int32_t BlockManager::NumHeld(const SeqBlocks& s) const {
  int32_t held = static_cast<int32_t>(s.table.size());
  for (BlockId b : s.window) held += b != kReleasedBlock;
  return held;
}

absl::Status BlockManager::Fork(SeqId parent, SeqId child) {
  if (seqs_.contains(child)) return absl::AlreadyExistsError("child sequence exists");
  const SeqBlocks& p = Get(parent);
  if (p.location != Location::kDevice) {
    return absl::FailedPreconditionError("cannot fork a swapped-out sequence");
  }
  SeqBlocks c = p;
  for (int t = 0; t < NumTables(); ++t) {
    for (BlockId b : Table(c, t)) {
      if (b != kReleasedBlock) device_.Acquire(b);
    }
  }
  seqs_.emplace(child, std::move(c));
  return absl::OkStatus();
}

bool BlockManager::IsSwappedOut(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.location == Location::kHost;
}

bool BlockManager::CanSwapOut(SeqId seq) const {
  const SeqBlocks& s = Get(seq);
  return s.location == Location::kDevice && num_host_blocks_ > 0 &&
         static_cast<int64_t>(host_free_.size()) >= NumHeld(s);
}

absl::Status BlockManager::SwapOut(SeqId seq, std::vector<BlockSwap>* ops) {
  if (!CanSwapOut(seq)) return absl::ResourceExhaustedError("not enough free host blocks");
  SeqBlocks& s = Get(seq);
  for (int t = 0; t < NumTables(); ++t) {
    std::vector<BlockId>& table = Table(s, t);
    std::vector<BlockId> host_table;
    host_table.reserve(table.size());
    for (BlockId device_block : table) {
      if (device_block == kReleasedBlock) {
        host_table.push_back(kReleasedBlock);
        continue;
      }
      const BlockId host_block = host_free_.back();
      host_free_.pop_back();
      ops->push_back({.src = device_block, .dst = host_block});
      host_table.push_back(host_block);
    }
    ReleaseTable(table);
    table = std::move(host_table);
  }
  s.location = Location::kHost;
  return absl::OkStatus();
}

bool BlockManager::CanSwapIn(SeqId seq, int32_t extra_blocks) const {
  const SeqBlocks& s = Get(seq);
  return s.location == Location::kHost &&
         static_cast<int64_t>(NumHeld(s)) + extra_blocks <= device_.NumAllocatable();
}

absl::Status BlockManager::SwapIn(SeqId seq, std::vector<BlockSwap>* ops) {
  if (!CanSwapIn(seq, 0)) return absl::ResourceExhaustedError("not enough free KV blocks");
  SeqBlocks& s = Get(seq);
  // Fresh device blocks are not re-entered into the prefix index; the originals may still be
  // cached there, and the copies are freed like any uncached block.
  for (int t = 0; t < NumTables(); ++t) {
    for (BlockId& block : Table(s, t)) {
      if (block == kReleasedBlock) continue;
      const BlockId device_block = device_.Allocate();
      ops->push_back({.src = block, .dst = device_block});
      host_free_.push_back(block);
      block = device_block;
    }
  }
  s.location = Location::kDevice;
  return absl::OkStatus();
}

void BlockManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int t = 0; t < NumTables(); ++t) {
    const std::vector<BlockId>& table = Table(it->second, t);
    if (it->second.location == Location::kDevice) {
      ReleaseTable(table);
    } else {
      for (BlockId b : table) {
        if (b != kReleasedBlock) host_free_.push_back(b);
      }
    }
  }
  seqs_.erase(it);
}

void BlockManager::ReleaseTable(const std::vector<BlockId>& table) {
  // Last block first: a sequence's tail is the part least likely to be shared by later
  // prompts, so it should reach the LRU head (evicted first) before its prefix does.
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    if (*it != kReleasedBlock) device_.Release(*it);
  }
}

std::span<const BlockId> BlockManager::BlockTable(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.table;
}

std::span<const BlockId> BlockManager::WindowTable(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.window;
}

BlockManagerStats BlockManager::Stats() const {
  return {
      .num_device_blocks = device_.num_blocks(),
      .num_free_device_blocks = device_.NumAllocatable(),
      .num_used_device_blocks = device_.num_blocks() - device_.NumAllocatable(),
      .num_cached_blocks = device_.NumCached(),
      .num_evictable_blocks = device_.NumEvictable(),
      .num_host_blocks = num_host_blocks_,
      .num_free_host_blocks = static_cast<int32_t>(host_free_.size()),
      .prefix_query_tokens = prefix_query_tokens_,
      .prefix_hit_tokens = prefix_hit_tokens_,
      .num_evictions = device_.num_evictions(),
      .num_cow_copies = num_cow_copies_,
  };
}

absl::Status BlockManager::CheckInvariants() const {
  std::vector<int32_t> refs(device_.num_blocks(), 0);
  std::vector<int32_t> host_owners(num_host_blocks_, 0);
  for (BlockId b : host_free_) {
    if (b < 0 || b >= num_host_blocks_) return absl::InternalError("bad host free block");
    ++host_owners[b];
  }
  for (const auto& [seq, s] : seqs_) {
    const bool on_device = s.location == Location::kDevice;
    const int32_t limit = on_device ? device_.num_blocks() : num_host_blocks_;
    if (window_tokens_ > 0 ? s.window.size() != s.table.size() : !s.window.empty()) {
      return absl::InternalError(absl::StrCat("seq ", seq, " has a window table of ",
                                              s.window.size(), " for ", s.table.size()));
    }
    for (int t = 0; t < NumTables(); ++t) {
      bool held = false;  // released entries form a prefix of the window table
      for (BlockId b : Table(s, t)) {
        if (t == 1 && b == kReleasedBlock && !held) continue;
        held = true;
        if (b < 0 || b >= limit) {
          return absl::InternalError(absl::StrCat("seq ", seq, " holds bad block ", b));
        }
        ++(on_device ? refs : host_owners)[b];
      }
    }
    if (s.hashes.size() > s.table.size()) {
      return absl::InternalError(absl::StrCat("seq ", seq, " has more hashes than blocks"));
    }
  }
  for (BlockId b = 0; b < num_host_blocks_; ++b) {
    if (host_owners[b] != 1) {
      return absl::InternalError(
          absl::StrCat("host block ", b, " owned ", host_owners[b], " times"));
    }
  }
  return device_.CheckInvariants(refs);
}

}  // namespace xserv::engine
