#include "common/tokenizer/word_cache.h"

#include <algorithm>
#include <memory>

namespace xserv::tokenizer {
namespace {

constexpr size_t kSlotsPerThread = 4;

struct Slot {
  uint64_t owner_id = 0;
  std::unique_ptr<WordCache> cache;
};

}  // namespace

WordCache& WordCache::ForThread(uint64_t owner_id) {
  // Most-recently-used first; a thread normally uses one model, so slot 0 hits.
  thread_local std::vector<Slot> slots;
  if (!slots.empty() && slots[0].owner_id == owner_id) return *slots[0].cache;
  auto it = std::find_if(slots.begin(), slots.end(),
                         [&](const Slot& s) { return s.owner_id == owner_id; });
  if (it == slots.end()) {
    if (slots.size() < kSlotsPerThread) {
      slots.push_back({owner_id, std::make_unique<WordCache>()});
    } else {
      slots.back() = {owner_id, std::make_unique<WordCache>()};
    }
    it = slots.end() - 1;
  }
  std::rotate(slots.begin(), it, it + 1);
  return *slots[0].cache;
}

std::span<const uint32_t> WordCache::Find(std::string_view key) const {
  auto it = map_.find(absl::string_view(key.data(), key.size()));
  if (it == map_.end()) return {};
  return std::span<const uint32_t>(ids_.data() + it->second.offset, it->second.length);
}

void WordCache::Insert(std::string_view key, std::span<const uint32_t> ids) {
  if (ids.empty() || key.size() > kMaxKeyBytes) return;
  if (map_.size() >= kMaxEntries) {
    map_.clear();
    ids_.clear();
  }
  const auto offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  map_.try_emplace(std::string(key), Entry{offset, static_cast<uint32_t>(ids.size())});
}

}  // namespace xserv::tokenizer
