// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (PCRE2 regex or literal, all five
// delimiter behaviours, invert), ByteLevel (optional prefix space, optional GPT-2 regex),
// Digits, Whitespace, WhitespaceSplit, and Sequence of those, with HF's semantics: every step
// runs on each piece produced so far, and empty pieces are dropped.
//
// The ByteLevel character mapping (' ' -> 'Ġ', ...) is not materialised here: pieces stay raw
// bytes and Run() reports that the mapping is pending, so the BPE model can key its cache on raw
// bytes and map only on a cache miss. A step after ByteLevel forces the mapping first.
//
// A PreTokenizer is immutable after construction; Run may be called from many threads, each
// with its own PreTokenizeScratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/regex.h"

namespace xserv::tokenizer {

// HF SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PieceRange {
  uint32_t begin;
  uint32_t end;
};

// Per-call buffers, reused across calls to avoid allocation. Pieces index into `arena`.
struct PreTokenizeScratch {
  std::string arena;
  std::vector<PieceRange> pieces;
  std::vector<PieceRange> next;
  std::vector<RegexMatch> matches;

  std::string_view piece(size_t i) const {
    return std::string_view(arena).substr(pieces[i].begin, pieces[i].end - pieces[i].begin);
  }
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit; kByteLevel when it uses the GPT-2 regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel only
};

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Splits `text` into scratch->pieces (views into scratch->arena). Returns true when the
  // pieces still await the ByteLevel byte-to-character mapping.
  bool Run(std::string_view text, PreTokenizeScratch* scratch) const;

  // The regex GPT-2's ByteLevel pre-tokenizer uses when use_regex is true.
  static std::string_view Gpt2Pattern();

 private:
  void SplitPieces(const PreTokenizerStep& step, PreTokenizeScratch* scratch) const;

  std::vector<PreTokenizerStep> steps_;
};

// Applies `behavior` to the matches of one piece [0, size): appends the resulting non-empty
// ranges, shifted by `base`, to `out`. Exposed for tests.
void ApplySplitBehavior(const std::vector<RegexMatch>& matches, uint32_t size, uint32_t base,
                        SplitBehavior behavior, bool invert, std::vector<PieceRange>* out);

}  // namespace xserv::tokenizer
