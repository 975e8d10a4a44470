// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocabulary, merge ranks, and HF's
// merge algorithm (lowest rank first, leftmost on ties), with ignore_merges, byte_fallback
// (<0xNN> tokens), unk / fuse_unk, continuing_subword_prefix and end_of_word_suffix.
//
// A BpeModel is immutable after Create and safe to share across threads; Tokenize uses a
// per-thread word cache (word_cache.h) and per-thread scratch buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace xserv::tokenizer {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `merges` are (left, right) token strings in rank order. Fails when a merge names a token,
  // or produces a token, that is not in `vocab` (as HF does).
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      std::vector<std::pair<std::string, uint32_t>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of one pre-token. With `byte_level`, `word` is raw bytes that first go
  // through the ByteLevel character mapping.
  void Tokenize(std::string_view word, bool byte_level, std::vector<uint32_t>* out) const;

  std::optional<uint32_t> TokenToId(std::string_view token) const;
  // nullptr when `id` is not in the vocabulary.
  const std::string* IdToToken(uint32_t id) const;
  // One past the largest id in the vocabulary.
  uint32_t id_end() const { return static_cast<uint32_t>(id_to_token_.size()); }
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeValue {
    uint32_t rank;
    uint32_t new_id;
  };
  struct Symbol {
    uint32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };

  BpeModel() = default;
  void TokenizeUncached(std::string_view word, bool byte_level, std::vector<uint32_t>* out) const;
  // HF BPE::merge_word up to the merge loop: one symbol per character (or per byte through
  // byte_fallback), unknown characters folded into unk or dropped.
  void InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const;
  void MergeAll(std::vector<Symbol>* symbols) const;
  const MergeValue* FindMerge(uint32_t left, uint32_t right) const;

  absl::flat_hash_map<std::string, uint32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, MergeValue> merges_;
  BpeOptions options_;
  std::optional<uint32_t> unk_id_;
  // Id of the byte-level character of each byte; valid when byte_symbols_ready_, which lets a
  // raw pre-token skip building its mapped string on the merge path.
  uint32_t byte_symbol_ids_[256] = {};
  bool byte_symbols_ready_ = false;
  uint64_t instance_id_ = 0;  // keys the per-thread word cache
};

}  // namespace xserv::tokenizer
