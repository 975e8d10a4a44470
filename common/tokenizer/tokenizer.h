// HuggingFace-exact tokenizer for the BPE family of tokenizer.json files (GPT-2, Qwen3,
// gpt-oss, Llama 3, ...): added tokens, normalizer, pre-tokenizer, BPE model, decoder.
//
// Ownership and threads: FromFile/FromJson return an owned, immutable Tokenizer. Once loaded, every
// const method (Encode, Decode, lookups) may be called concurrently from any number of threads;
// per-thread caches and scratch buffers live in thread-local storage, never in the object.
//
// Encode policy:
//   - Special tokens are matched in the text ("<|im_start|>" -> 151644), as HF does by default.
//   - The post-processor is never applied: no BOS/EOS is added. bos_id() says what HF's
//     TemplateProcessing would prepend with add_special_tokens=True; callers that want it prepend
//     it themselves.
//   - Invalid UTF-8 input (which a Python str can never hold) is first converted as Python's
//     bytes.decode('utf-8', errors='replace') would: each maximal invalid subpart becomes one
//     U+FFFD. Valid input is tokenized byte-for-byte like HF `tokenizers`.
// Decode policy: HF Tokenizer.decode. Added tokens decode to their content; ids outside the
// vocabulary are dropped; bytes that do not form UTF-8 become U+FFFD per maximal subpart.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/added_vocabulary.h"

namespace xserv::tokenizer {

struct TokenizerParts;
class AddedTokenMatcher;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory containing one.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<uint32_t> Encode(std::string_view text) const;
  // Appends the ids of `text` to `ids` (lets callers reuse one buffer).
  void EncodeAppend(std::string_view text, std::vector<uint32_t>* ids) const;

  std::string Decode(std::span<const uint32_t> ids, bool skip_special_tokens = false) const;

  // Added tokens first, then the model vocabulary (HF token_to_id / id_to_token).
  std::optional<uint32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(uint32_t id) const;
  // One past the largest token id (model vocabulary and added tokens). The model's embedding
  // table may be larger (padding rows).
  uint32_t vocab_size() const { return id_end_; }
  // True for added tokens marked special (what skip_special_tokens drops).
  bool IsSpecial(uint32_t id) const { return id < is_special_.size() && is_special_[id]; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  std::optional<uint32_t> bos_id() const { return bos_id_; }

 private:
  friend class IncrementalDecoder;

  explicit Tokenizer(TokenizerParts parts);
  // Normalizes, pre-tokenizes and runs the model on text free of raw-matched added tokens.
  void EncodeSegment(std::string_view segment, std::vector<uint32_t>* ids) const;
  void EncodePreTokenized(std::string_view text, std::vector<uint32_t>* ids) const;
  // The string HF's decoder receives for `id`, or nullptr when the id is unknown.
  const std::string* DecodeString(uint32_t id) const;
  // True when Decode is "ByteLevel bytes of each token, then lossy UTF-8" (see decoder.h);
  // then TokenBytes gives each token's bytes.
  bool byte_level_decode() const { return byte_level_decode_; }
  std::string_view TokenBytes(uint32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;         // added tokens with normalized=false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher_;  // normalized=true, on normalized text
  std::vector<AddedToken> added_tokens_;
  std::vector<int32_t> added_index_;  // id -> index in added_tokens_, or -1
  absl::flat_hash_map<std::string, uint32_t> added_ids_;  // content -> id
  std::vector<bool> is_special_;
  std::optional<uint32_t> bos_id_;
  uint32_t id_end_ = 0;
  bool byte_level_decode_ = false;
  std::string token_bytes_;               // concatenated ByteLevel-decoded bytes of every id
  std::vector<uint32_t> token_bytes_end_;  // id -> end offset in token_bytes_
};

}  // namespace xserv::tokenizer
