// Added tokens of tokenizer.json ("added_tokens"): matched whole in the input before
// normalization and pre-tokenization, special or not (Qwen3's "<think>" is not special but is
// still matched), with HF's leftmost-longest matching and single_word / lstrip / rstrip rules.
// Tokens with normalized=false are matched on the raw text; tokens with normalized=true are
// matched on the normalized text, against their normalized content.
//
// An AddedVocabulary is immutable after construction and may be used from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xserv::tokenizer {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// One part of a split: either plain text [begin, end) or an added token covering it.
struct AddedSplit {
  uint32_t begin;
  uint32_t end;
  int64_t token_id;  // -1 for plain text
};

// Leftmost-longest matcher over a fixed set of patterns (a byte trie).
class AddedTokenMatcher {
 public:
  // `patterns[i]` stands for `tokens[i]`; empty patterns are ignored.
  AddedTokenMatcher(const std::vector<std::string>& patterns, std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // Splits `text` into plain parts and added tokens (HF AddedVocabulary::find_matches).
  void Split(std::string_view text, std::vector<AddedSplit>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens_
  };
  // Longest pattern starting at `pos`: token index and length, or -1.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* length) const;

  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

}  // namespace xserv::tokenizer
