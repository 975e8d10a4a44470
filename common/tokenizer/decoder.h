// Decoders of tokenizer.json ("decoder"): ByteLevel, ByteFallback, Fuse, Strip, Replace and
// Sequence, each a step of HF's decode_chain over the list of token strings. The final text is
// the concatenation of what the chain returns (HF joins with "" when a decoder is configured and
// with " " when there is none).
//
// A Decoder is immutable after construction and may be used from many threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/regex.h"

namespace xserv::tokenizer {

struct DecoderStep {
  enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  // kStrip: strip up to `strip_start` leading and `strip_stop` trailing `strip_content` chars.
  char32_t strip_content = ' ';
  size_t strip_start = 0;
  size_t strip_stop = 0;
  // kReplace: every match of `pattern` is replaced by `content`.
  std::shared_ptr<const Regex> pattern;
  std::string content;
};

class Decoder {
 public:
  // An empty step list means "no decoder": tokens are joined with spaces.
  explicit Decoder(std::vector<DecoderStep> steps) : steps_(std::move(steps)) {}

  // True when decoding is exactly "ByteLevel alone": each token maps to bytes independently
  // and the text is the lossy UTF-8 decoding of their concatenation (allows fast paths).
  bool is_byte_level_only() const {
    return steps_.size() == 1 && steps_[0].kind == DecoderStep::Kind::kByteLevel;
  }

  std::string Decode(std::vector<std::string> tokens) const;

 private:
  std::vector<DecoderStep> steps_;
};

}  // namespace xserv::tokenizer
