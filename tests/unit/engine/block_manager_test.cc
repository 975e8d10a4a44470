#include "worker/engine/block_manager.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/block_hash.h"
#include "worker/engine/block_pool.h"

namespace xserv::engine {
namespace {

using ::testing::ElementsAre;

std::vector<int32_t> Iota(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

BlockManagerConfig Config(int32_t device, int32_t host = 0, bool cache = true) {
  return {.num_device_blocks = device,
          .block_size = 16,
          .num_host_blocks = host,
          .enable_prefix_caching = cache};
}

// Allocates `seq` for all of `tokens`, computes them, and returns the cached-token count.
int32_t AddComputed(BlockManager& bm, SeqId seq, const std::vector<int32_t>& tokens) {
  PrefixMatch match = bm.FindCachedPrefix(tokens);
  EXPECT_TRUE(bm.AllocateSequence(seq, tokens, match, static_cast<int32_t>(tokens.size()),
                                  /*count_prefix_query=*/true)
                  .ok());
  bm.CommitComputed(seq, tokens, static_cast<int32_t>(tokens.size()));
  return match.num_tokens;
}

TEST(BlockManagerConfig, Validates) {
  EXPECT_TRUE(Config(4).Validate().ok());
  EXPECT_FALSE(Config(0).Validate().ok());
  EXPECT_FALSE((BlockManagerConfig{.num_device_blocks = 4, .block_size = 0}).Validate().ok());
}

TEST(BlockManager, AllocatesGrowsAndFrees) {
  BlockManager bm(Config(8));
  const auto tokens = Iota(20);
  ASSERT_TRUE(bm.AllocateSequence(1, tokens, {}, 20, false).ok());
  EXPECT_THAT(bm.BlockTable(1), ElementsAre(0, 1));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.AllocateSlots(1, 20, 33, &copies).ok());
  EXPECT_THAT(bm.BlockTable(1), ElementsAre(0, 1, 2));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 3);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  bm.Free(1);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 8);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, ShortPoolFailsWithoutSideEffects) {
  BlockManager bm(Config(2));
  const auto tokens = Iota(40);
  EXPECT_EQ(bm.AllocateSequence(1, tokens, {}, 40, false).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(bm.HasSequence(1));
  ASSERT_TRUE(bm.AllocateSequence(1, tokens, {}, 32, false).ok());
  std::vector<BlockCopy> copies;
  EXPECT_EQ(bm.AllocateSlots(1, 32, 33, &copies).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.BlockTable(1).size(), 2u);
  EXPECT_EQ(bm.MaxAppendableTokens(1, 32, 10), 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, MaxAppendableTokensFillsPartialBlockThenFreeBlocks) {
  BlockManager bm(Config(3));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(5), {}, 5, false).ok());
  // 11 slots left in block 0, plus two free blocks of 16.
  EXPECT_EQ(bm.MaxAppendableTokens(1, 5, 100), 11 + 32);
  EXPECT_EQ(bm.MaxAppendableTokens(1, 5, 7), 7);
  EXPECT_EQ(bm.NumBlocksNeeded(1, 5, 5 + 12), 1);
}

TEST(BlockManager, PrefixHitSharesFullBlocksOnly) {
  BlockManager bm(Config(16));
  auto a = Iota(40);
  EXPECT_EQ(AddComputed(bm, 1, a), 0);
  EXPECT_EQ(bm.Stats().num_cached_blocks, 2);  // 40 tokens: two full blocks, one partial

  auto b = Iota(40);
  b.resize(45, 7);  // same 40-token prefix, different tail
  EXPECT_EQ(AddComputed(bm, 2, b), 32);
  auto ta = bm.BlockTable(1);
  auto tb = bm.BlockTable(2);
  EXPECT_EQ(ta[0], tb[0]);
  EXPECT_EQ(ta[1], tb[1]);
  EXPECT_NE(ta[2], tb[2]);  // the partial block is never shared
  EXPECT_EQ(bm.RefCount(ta[0]), 2);
  EXPECT_EQ(bm.RefCount(ta[2]), 1);
  const BlockManagerStats stats = bm.Stats();
  EXPECT_EQ(stats.prefix_query_tokens, 85u);
  EXPECT_EQ(stats.prefix_hit_tokens, 32u);
  EXPECT_TRUE(bm.CheckInvariants().ok());

  bm.Free(1);
  EXPECT_EQ(bm.RefCount(tb[0]), 1);
  bm.Free(2);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_EQ(bm.Stats().num_evictable_blocks, 2);  // the two shared full blocks
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, HitLeavesTheLastTokenToCompute) {
  BlockManager bm(Config(8));
  AddComputed(bm, 1, Iota(32));
  bm.Free(1);
  // An identical 32-token prompt: only the first block may be reused, the last token (and its
  // block) is recomputed so that the step has logits to sample from.
  EXPECT_EQ(bm.FindCachedPrefix(Iota(32)).num_tokens, 16);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33)).num_tokens, 32);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33, 1)).num_tokens, 0);  // different first block
}

TEST(BlockManager, ChainHashDependsOnTheWholePrefix) {
  BlockManager bm(Config(8));
  auto a = Iota(33);
  AddComputed(bm, 1, a);
  // Same second block, different first block: the second block must not hit.
  auto b = a;
  b[0] = 999;
  EXPECT_EQ(bm.FindCachedPrefix(b).num_tokens, 0);
}

TEST(BlockManager, EvictsLeastRecentlyFreedCachedBlocksOnlyWhenNeeded) {
  BlockManager bm(Config(4));
  AddComputed(bm, 1, Iota(32, 0));    // blocks 0,1
  AddComputed(bm, 2, Iota(32, 100));  // blocks 2,3
  bm.Free(1);
  bm.Free(2);
  EXPECT_EQ(bm.Stats().num_evictable_blocks, 4);
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 4);
  // Both prompts are still cached.
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33, 0)).num_tokens, 32);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33, 100)).num_tokens, 32);
  // Two fresh blocks evict seq 1's blocks (freed first), tail before head.
  ASSERT_TRUE(bm.AllocateSequence(3, Iota(32, 500), {}, 32, false).ok());
  EXPECT_THAT(bm.BlockTable(3), ElementsAre(1, 0));
  EXPECT_EQ(bm.Stats().num_evictions, 2u);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33, 0)).num_tokens, 0);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(33, 100)).num_tokens, 32);
  // A hit takes evictable blocks back without evicting anything.
  const auto prompt = Iota(40, 100);
  PrefixMatch match = bm.FindCachedPrefix(prompt);
  EXPECT_EQ(match.num_tokens, 32);
  EXPECT_EQ(match.num_evictable, 2);
  ASSERT_TRUE(bm.AllocateSequence(4, prompt, match, 32, true).ok());
  EXPECT_THAT(bm.BlockTable(4), ElementsAre(2, 3));
  EXPECT_EQ(bm.Stats().num_evictions, 2u);
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, HitsOnEvictableBlocksCountAgainstThePool) {
  BlockManager bm(Config(3));
  AddComputed(bm, 1, Iota(32));
  bm.Free(1);
  PrefixMatch match = bm.FindCachedPrefix(Iota(40));
  EXPECT_EQ(match.num_tokens, 32);
  EXPECT_EQ(match.num_evictable, 2);
  // 2 hits + 2 fresh blocks > 3.
  EXPECT_FALSE(bm.AllocateSequence(2, Iota(40), match, 40 + 16, true).ok());
  ASSERT_TRUE(bm.AllocateSequence(2, Iota(40), match, 40, true).ok());
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, DisabledPrefixCachingNeverHits) {
  BlockManager bm(Config(8, 0, /*cache=*/false));
  AddComputed(bm, 1, Iota(40));
  EXPECT_EQ(bm.Stats().num_cached_blocks, 0);
  EXPECT_EQ(bm.FindCachedPrefix(Iota(40)).num_tokens, 0);
  bm.Free(1);
  EXPECT_EQ(bm.Stats().num_evictable_blocks, 0);
}

TEST(BlockManager, CopyOnWriteWhenAppendingIntoASharedBlock) {
  BlockManager bm(Config(8));
  const auto tokens = Iota(20);
  AddComputed(bm, 1, tokens);  // blocks 0 (full, cached), 1 (4 tokens, partial)
  ASSERT_TRUE(bm.Fork(1, 2).ok());
  EXPECT_EQ(bm.RefCount(1), 2);
  EXPECT_EQ(bm.NumBlocksNeeded(2, 20, 21), 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.AllocateSlots(2, 20, 21, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(bm.BlockTable(2)[1], copies[0].dst);
  EXPECT_EQ(bm.BlockTable(2)[0], 0);  // the full block stays shared
  EXPECT_EQ(bm.RefCount(0), 2);
  EXPECT_EQ(bm.RefCount(1), 1);
  // The parent now owns its block alone: no copy.
  copies.clear();
  ASSERT_TRUE(bm.AllocateSlots(1, 20, 21, &copies).ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.Stats().num_cow_copies, 1u);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  bm.Free(1);
  bm.Free(2);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, SwapOutAndInMoveEveryBlock) {
  BlockManager bm(Config(4, 3));
  const auto tokens = Iota(40);
  AddComputed(bm, 1, tokens);
  ASSERT_TRUE(bm.CanSwapOut(1));
  std::vector<BlockSwap> out;
  ASSERT_TRUE(bm.SwapOut(1, &out).ok());
  EXPECT_THAT(out, ElementsAre(BlockSwap{0, 0}, BlockSwap{1, 1}, BlockSwap{2, 2}));
  EXPECT_TRUE(bm.IsSwappedOut(1));
  EXPECT_EQ(bm.NumFreeHostBlocks(), 0);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  // Device space taken meanwhile: swap-in needs 3 blocks, only 2 remain.
  ASSERT_TRUE(bm.AllocateSequence(2, Iota(16, 300), {}, 16, false).ok());
  EXPECT_TRUE(bm.CanSwapIn(1, 0));  // 4 - 1 used, two of them evictable cached blocks
  EXPECT_FALSE(bm.CanSwapIn(1, 1));
  std::vector<BlockSwap> in;
  ASSERT_TRUE(bm.SwapIn(1, &in).ok());
  ASSERT_EQ(in.size(), 3u);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(in[i].src, static_cast<BlockId>(i));
    EXPECT_EQ(bm.BlockTable(1)[i], in[i].dst);
  }
  EXPECT_EQ(bm.NumFreeHostBlocks(), 3);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManager, SwapNeedsHostRoom) {
  BlockManager no_swap(Config(4, 0));
  ASSERT_TRUE(no_swap.AllocateSequence(1, Iota(5), {}, 5, false).ok());
  EXPECT_FALSE(no_swap.CanSwapOut(1));
  BlockManager small(Config(4, 1));
  ASSERT_TRUE(small.AllocateSequence(1, Iota(20), {}, 20, false).ok());
  EXPECT_FALSE(small.CanSwapOut(1));
  std::vector<BlockSwap> ops;
  EXPECT_FALSE(small.SwapOut(1, &ops).ok());
  EXPECT_TRUE(ops.empty());
}

TEST(BlockManager, FreeOfSwappedSequenceReturnsHostBlocks) {
  BlockManager bm(Config(4, 4));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(20), {}, 20, false).ok());
  std::vector<BlockSwap> ops;
  ASSERT_TRUE(bm.SwapOut(1, &ops).ok());
  bm.Free(1);
  EXPECT_EQ(bm.NumFreeHostBlocks(), 4);
  EXPECT_EQ(bm.NumSequences(), 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

// Sliding-window layers: a second table per sequence from the same pool; blocks wholly before
// the window of the next query are released.
BlockManagerConfig WindowConfig(int32_t device, int32_t host = 0, int32_t window = 40) {
  return {.num_device_blocks = device,
          .block_size = 16,
          .num_host_blocks = host,
          .enable_prefix_caching = false,
          .window_tokens = window};
}

TEST(BlockManagerConfig, WindowNeedsPrefixCachingOff) {
  EXPECT_TRUE(WindowConfig(4).Validate().ok());
  BlockManagerConfig cached = WindowConfig(4);
  cached.enable_prefix_caching = true;
  EXPECT_FALSE(cached.Validate().ok());
  EXPECT_FALSE(WindowConfig(4, 0, -1).Validate().ok());
}

TEST(BlockManagerWindow, AllocatesBothTablesAndReleasesBlocksBeforeTheWindow) {
  BlockManager bm(WindowConfig(16));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(50), {}, 50, false).ok());
  EXPECT_EQ(bm.BlockTable(1).size(), 4u);
  EXPECT_EQ(bm.WindowTable(1).size(), 4u);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 8);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  // After 50 tokens the next query (position 50) reads keys 11..50: block 0 (keys 0-15) stays.
  bm.ReleaseOutsideWindow(1, 50);
  EXPECT_NE(bm.WindowTable(1)[0], kReleasedBlock);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 8);
  // After 57: keys from 18 on; block 0 goes, block 1 (16-31) stays.
  bm.ReleaseOutsideWindow(1, 57);
  EXPECT_EQ(bm.WindowTable(1)[0], kReleasedBlock);
  EXPECT_NE(bm.WindowTable(1)[1], kReleasedBlock);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 7);
  EXPECT_EQ(bm.BlockTable(1).size(), 4u);  // the full table keeps everything
  EXPECT_TRUE(bm.CheckInvariants().ok());
  // Growing past block 3 takes a block in each table.
  EXPECT_EQ(bm.NumBlocksNeeded(1, 57, 70), 2);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.AllocateSlots(1, 57, 70, &copies).ok());
  EXPECT_EQ(bm.BlockTable(1).size(), 5u);
  EXPECT_EQ(bm.WindowTable(1).size(), 5u);
  EXPECT_TRUE(copies.empty());
  bm.ReleaseOutsideWindow(1, 70);  // keys from 31 on: block 1 (16-31) still holds key 31
  EXPECT_NE(bm.WindowTable(1)[1], kReleasedBlock);
  bm.ReleaseOutsideWindow(1, 72);  // keys from 33 on
  EXPECT_EQ(bm.WindowTable(1)[1], kReleasedBlock);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 8);  // 5 full + blocks 2..4 of the window
  EXPECT_TRUE(bm.CheckInvariants().ok());
  bm.Free(1);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManagerWindow, AdmissionAndAppendCountBothTables) {
  BlockManager bm(WindowConfig(5, 0, /*window=*/16));
  // 40 tokens: 3 blocks per table, 6 in all; the pool has 5.
  EXPECT_EQ(bm.AllocateSequence(1, Iota(40), {}, 40, false).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(bm.HasSequence(1));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(32), {}, 32, false).ok());  // 2 + 2 blocks
  // Block 2 takes one block in each table and one is free.
  EXPECT_EQ(bm.MaxAppendableTokens(1, 32, 100), 0);
  // With 32 tokens computed the next query reads keys 17.. : window block 0 is released.
  bm.ReleaseOutsideWindow(1, 32);
  EXPECT_EQ(bm.WindowTable(1)[0], kReleasedBlock);
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 2);
  EXPECT_EQ(bm.MaxAppendableTokens(1, 32, 100), 16);
  EXPECT_EQ(bm.NumBlocksNeeded(1, 32, 48), 2);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.AllocateSlots(1, 32, 48, &copies).ok());
  EXPECT_EQ(bm.NumFreeDeviceBlocks(), 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManagerWindow, ForkSharesAndCopiesBothTables) {
  BlockManager bm(WindowConfig(16));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(60), {}, 60, false).ok());
  bm.ReleaseOutsideWindow(1, 60);  // keys from 21 on: window block 0 released
  ASSERT_TRUE(bm.Fork(1, 2).ok());
  EXPECT_EQ(bm.WindowTable(2)[0], kReleasedBlock);
  EXPECT_EQ(bm.RefCount(bm.WindowTable(1)[3]), 2);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  // Appending into the shared partial block 3 copies it in both tables.
  EXPECT_EQ(bm.NumBlocksNeeded(2, 60, 61), 2);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.AllocateSlots(2, 60, 61, &copies).ok());
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_NE(bm.BlockTable(2)[3], bm.BlockTable(1)[3]);
  EXPECT_NE(bm.WindowTable(2)[3], bm.WindowTable(1)[3]);
  EXPECT_EQ(bm.WindowTable(2)[1], bm.WindowTable(1)[1]);  // full blocks stay shared
  EXPECT_TRUE(bm.CheckInvariants().ok());
  bm.Free(1);
  bm.Free(2);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManagerWindow, SwapMovesOnlyHeldBlocks) {
  BlockManager bm(WindowConfig(16, 7));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(60), {}, 60, false).ok());  // 4 + 4 blocks
  bm.ReleaseOutsideWindow(1, 60);                                     // 4 + 3 held
  ASSERT_TRUE(bm.CanSwapOut(1));
  std::vector<BlockSwap> out;
  ASSERT_TRUE(bm.SwapOut(1, &out).ok());
  EXPECT_EQ(out.size(), 7u);
  EXPECT_EQ(bm.NumFreeHostBlocks(), 0);
  EXPECT_EQ(bm.WindowTable(1)[0], kReleasedBlock);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  EXPECT_TRUE(bm.CanSwapIn(1, 9));
  EXPECT_FALSE(bm.CanSwapIn(1, 10));
  std::vector<BlockSwap> in;
  ASSERT_TRUE(bm.SwapIn(1, &in).ok());
  EXPECT_EQ(in.size(), 7u);
  EXPECT_EQ(bm.WindowTable(1)[0], kReleasedBlock);
  EXPECT_EQ(bm.NumFreeHostBlocks(), 7);
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 7);
  EXPECT_TRUE(bm.CheckInvariants().ok());
  std::vector<BlockSwap> again;
  ASSERT_TRUE(bm.SwapOut(1, &again).ok());
  bm.Free(1);  // a swapped-out sequence returns its held host blocks only
  EXPECT_EQ(bm.NumFreeHostBlocks(), 7);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(BlockManagerWindow, NoWindowMeansNoWindowTable) {
  BlockManager bm(Config(8, 0, false));
  ASSERT_TRUE(bm.AllocateSequence(1, Iota(40), {}, 40, false).ok());
  EXPECT_TRUE(bm.WindowTable(1).empty());
  bm.ReleaseOutsideWindow(1, 40);  // no-op
  EXPECT_EQ(bm.Stats().num_used_device_blocks, 3);
  EXPECT_TRUE(bm.CheckInvariants().ok());
}

TEST(DeviceBlockPool, CollisionIsAMissNotAWrongBlock) {
  DeviceBlockPool pool(2, 4);
  const BlockId b = pool.Allocate();
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  ASSERT_TRUE(pool.Register(b, /*hash=*/42, kRootBlockHash, tokens));
  EXPECT_EQ(pool.Lookup(42, kRootBlockHash, tokens), b);
  // Same hash, other content (a forced collision): miss.
  const std::vector<int32_t> other = {1, 2, 3, 5};
  EXPECT_FALSE(pool.Lookup(42, kRootBlockHash, other).has_value());
  EXPECT_FALSE(pool.Lookup(42, /*parent_hash=*/7, tokens).has_value());
  // A second block with the same hash stays uncached.
  const BlockId c = pool.Allocate();
  EXPECT_FALSE(pool.Register(c, 42, kRootBlockHash, tokens));
  EXPECT_FALSE(pool.IsCached(c));
}

TEST(ChainBlockHash, IsDeterministicAndOrderSensitive) {
  const std::vector<int32_t> a = {1, 2, 3};
  const std::vector<int32_t> b = {3, 2, 1};
  EXPECT_EQ(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(kRootBlockHash, a));
  EXPECT_NE(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(kRootBlockHash, b));
  EXPECT_NE(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(1, a));
}

}  // namespace
}  // namespace xserv::engine
