// Bounded cache of pre-token -> token ids, one per thread and model, so repeated words skip
// byte mapping and BPE merging entirely. Keys are the raw pre-token bytes.
//
// ForThread() returns the calling thread's cache for one model instance; nothing is shared
// between threads, so no locking is needed and a model stays immutable. Each thread keeps caches
// for its few most recently used models; a cache is simply cleared when it is full.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace xserv::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxKeyBytes = 64;  // longer pre-tokens are rare; not worth caching

  // The calling thread's cache for the model with unique id `owner_id`.
  static WordCache& ForThread(uint64_t owner_id);

  // The cached ids of `key`, or an empty span when absent (a cached word is never empty).
  std::span<const uint32_t> Find(std::string_view key) const;
  void Insert(std::string_view key, std::span<const uint32_t> ids);

 private:
  struct Entry {
    uint32_t offset;
    uint32_t length;
  };
  absl::flat_hash_map<std::string, Entry> map_;
  std::vector<uint32_t> ids_;
};

}  // namespace xserv::tokenizer
