// Chain hash of full KV blocks for prefix caching: the hash of block i covers the hash of block
// i-1 and block i's token ids, so equal hashes mean (with overwhelming probability) equal
// prefixes, not only equal blocks.
//
// Pure functions; any thread. The value is deterministic across processes and runs (no
// per-process seed, unlike absl::Hash), so logs and a future router-side prefix-affinity hash
// can agree with the worker. It is not cryptographic: the block pool stores each cached block's
// tokens and parent hash and verifies them on lookup, so a collision costs a cache miss, never a
// wrong KV block.
#pragma once

#include <cstdint>
#include <span>

namespace xserv::engine {

// Parent hash of the first block of every sequence.
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ULL;

// splitmix64 finaliser: a bijective mix with full avalanche.
inline constexpr uint64_t MixHash64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Hash of a block holding `tokens` that follows the block hashed `parent_hash`. The token count
// is folded in so a block is never confused with a shorter prefix of itself.
inline uint64_t ChainBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = MixHash64(parent_hash ^ (0x632be59bd9b4e019ULL * (tokens.size() + 1)));
  for (int32_t token : tokens) {
    h = MixHash64(h + 0xd6e8feb86659fd93ULL * (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1));
  }
  return h;
}

}  // namespace xserv::engine
