#include "common/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/utf8.h"
#include "common/tokenizer/word_cache.h"
#include "spdlog/spdlog.h"

namespace xserv::tokenizer {
namespace {

inline uint64_t PairKey(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}

inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

struct HeapEntry {
  uint32_t rank;
  uint32_t pos;
  uint32_t new_id;
};

// std heap functions build a max-heap; this order puts the lowest rank, then the lowest
// position, on top (HF's Merge ordering).
struct HeapOrder {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

std::atomic<uint64_t> next_instance_id{1};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    std::vector<std::pair<std::string, uint32_t>> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  model->instance_id_ = next_instance_id.fetch_add(1);
  uint32_t id_end = 0;
  for (const auto& [token, id] : vocab) id_end = std::max(id_end, id + 1);
  model->id_to_token_.resize(id_end);
  model->has_id_.assign(id_end, false);
  model->vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    model->id_to_token_[id] = token;
    model->has_id_[id] = true;
    model->vocab_.insert_or_assign(std::move(token), id);
  }

  const std::string prefix = options.continuing_subword_prefix.value_or("");
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto left_id = model->TokenToId(left);
    auto right_id = model->TokenToId(right);
    if (!left_id || !right_id) {
      return absl::InvalidArgumentError(absl::StrCat("BPE merge ", rank, " ('", left, "', '",
                                                     right, "') uses a token not in the vocab"));
    }
    // The merged token drops the right side's continuing-subword prefix (HF BPE::from_builder).
    std::string merged = left;
    if (!prefix.empty() && right.compare(0, prefix.size(), prefix) == 0) {
      merged.append(right, prefix.size());
    } else {
      merged.append(right);
    }
    auto new_id = model->TokenToId(merged);
    if (!new_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE merge ", rank, " produces '", merged, "', which is not in the vocab"));
    }
    // Later duplicates win, as in HF (collecting into a HashMap).
    model->merges_.insert_or_assign(PairKey(*left_id, *right_id),
                                    MergeValue{static_cast<uint32_t>(rank), *new_id});
  }

  if (options.unk_token) {
    model->unk_id_ = model->TokenToId(*options.unk_token);
    if (!model->unk_id_) {
      spdlog::warn("tokenizer: unk_token '{}' is not in the vocab; unknown characters dropped",
                   *options.unk_token);
    }
  }
  model->options_ = std::move(options);
  const bool affixes = !model->options_.continuing_subword_prefix.value_or("").empty() ||
                       !model->options_.end_of_word_suffix.value_or("").empty();
  model->byte_symbols_ready_ = !affixes;
  for (int b = 0; b < 256 && model->byte_symbols_ready_; ++b) {
    auto id = model->TokenToId(ByteToUnicodeUtf8(static_cast<uint8_t>(b)));
    if (id) {
      model->byte_symbol_ids_[b] = *id;
    } else {
      model->byte_symbols_ready_ = false;
    }
  }
  return model;
}

std::optional<uint32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AbslView(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(uint32_t id) const {
  if (id >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::MergeValue* BpeModel::FindMerge(uint32_t left, uint32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::Tokenize(std::string_view word, bool byte_level,
                        std::vector<uint32_t>* out) const {
  if (word.empty()) return;
  WordCache& cache = WordCache::ForThread(instance_id_);
  const bool cacheable = word.size() <= WordCache::kMaxKeyBytes;
  if (cacheable) {
    std::span<const uint32_t> hit = cache.Find(word);
    if (!hit.empty()) {
      out->insert(out->end(), hit.begin(), hit.end());
      return;
    }
  }
  const size_t mark = out->size();
  TokenizeUncached(word, byte_level, out);
  if (cacheable) cache.Insert(word, std::span<const uint32_t>(out->data() + mark, out->size() - mark));
}

void BpeModel::TokenizeUncached(std::string_view word, bool byte_level,
                                std::vector<uint32_t>* out) const {
  thread_local std::string mapped;
  thread_local std::vector<Symbol> symbols;
  std::string_view w = word;
  if (byte_level) {
    mapped.clear();
    AppendByteLevelEncoded(word, &mapped);
    w = mapped;
  }
  // ignore_merges: a whole pre-token that is itself a token is emitted as is.
  if (options_.ignore_merges) {
    if (auto id = TokenToId(w)) {
      out->push_back(*id);
      return;
    }
  }
  symbols.clear();
  if (byte_level && byte_symbols_ready_) {
    for (size_t i = 0; i < word.size(); ++i) {
      const auto pos = static_cast<int32_t>(i);
      symbols.push_back({byte_symbol_ids_[static_cast<uint8_t>(word[i])], pos - 1, pos + 1, true});
    }
  } else {
    InitialSymbols(w, &symbols);
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  MergeAll(&symbols);
  for (const Symbol& s : symbols) {
    if (s.alive) out->push_back(s.id);
  }
}

void BpeModel::InitialSymbols(std::string_view w, std::vector<Symbol>* symbols) const {
  const std::string& prefix = options_.continuing_subword_prefix.value_or(std::string());
  const std::string& suffix = options_.end_of_word_suffix.value_or(std::string());
  auto add = [&](uint32_t id) {
    const auto pos = static_cast<int32_t>(symbols->size());
    symbols->push_back({id, pos - 1, pos + 1, true});
  };
  int64_t pending_unk = -1;  // id of the unk not yet added
  std::string key;
  size_t i = 0;
  while (i < w.size()) {
    const uint32_t len = DecodeUtf8Char(w, i).length;
    const bool is_first = i == 0;
    const bool is_last = i + len >= w.size();
    key.clear();
    if (!is_first) key.append(prefix);
    key.append(w.substr(i, len));
    if (is_last) key.append(suffix);
    i += len;
    if (auto id = TokenToId(key)) {
      if (pending_unk >= 0) add(static_cast<uint32_t>(pending_unk));
      pending_unk = -1;
      add(*id);
      continue;
    }
    if (options_.byte_fallback) {
      // Every byte of the (affixed) character must have its <0xNN> token, or none is used.
      uint32_t byte_ids[64];
      bool all = key.size() <= 64;
      for (size_t k = 0; all && k < key.size(); ++k) {
        auto id = TokenToId(absl::StrFormat("<0x%02X>", static_cast<uint8_t>(key[k])));
        if (id) {
          byte_ids[k] = *id;
        } else {
          all = false;
        }
      }
      if (all) {
        for (size_t k = 0; k < key.size(); ++k) add(byte_ids[k]);
        continue;
      }
    }
    if (unk_id_) {
      // HF keeps one pending unk: consecutive unknowns fuse into it when fuse_unk is set.
      if (pending_unk >= 0 && !options_.fuse_unk) add(static_cast<uint32_t>(pending_unk));
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(static_cast<uint32_t>(pending_unk));
}

void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& sym = *symbols_ptr;
  thread_local std::vector<HeapEntry> heap;
  heap.clear();
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    if (const MergeValue* m = FindMerge(sym[i].id, sym[i + 1].id)) {
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), HeapOrder());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), HeapOrder());
    const HeapEntry top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t right_pos = cur.next;
    const Symbol right = sym[right_pos];
    // Skip entries made stale by earlier merges (HF compares the produced id only).
    const MergeValue* now = FindMerge(cur.id, right.id);
    if (now == nullptr || now->new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.next = right.next;
    sym[right_pos].alive = false;
    if (right.next >= 0) sym[right.next].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      if (const MergeValue* m = FindMerge(sym[cur.prev].id, cur.id)) {
        heap.push_back({m->rank, static_cast<uint32_t>(cur.prev), m->new_id});
        std::push_heap(heap.begin(), heap.end(), HeapOrder());
      }
    }
    if (cur.next >= 0) {
      if (const MergeValue* m = FindMerge(cur.id, sym[cur.next].id)) {
        heap.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end(), HeapOrder());
      }
    }
  }
}

}  // namespace xserv::tokenizer
