// Streaming detokenization: feed generated ids one at a time, get text deltas that never end in
// a broken UTF-8 sequence. The concatenation of every delta plus Flush() equals
// tokenizer.Decode(all ids, skip_special_tokens).
//
// Two strategies, chosen from the tokenizer's decoder:
//   - ByteLevel decoders (GPT-2, Qwen3, gpt-oss, Llama 3): token bytes are appended to a pending
//     buffer and everything but a trailing, still-completable UTF-8 prefix (at most 3 bytes) is
//     emitted. O(token length) per step, exact by construction: lossy UTF-8 decoding is a
//     left-to-right automaton and we only cut where it is back at a character boundary.
//   - Any other decoder chain: vLLM/TGI's prefix/read offsets. The window [prefix, end) is
//     decoded and the text past the prefix window's text is emitted unless it ends in U+FFFD;
//     the window is bounded (kMaxWindowTokens) so a stream of invalid bytes cannot make it grow.
//     Exact as long as later tokens never rewrite earlier text; HF's ByteFallback does so for
//     an invalid <0xNN> run (one U+FFFD per byte of the whole run), which no stream can match.
//
// Ownership and threads: borrows the Tokenizer (which must outlive it); one IncrementalDecoder
// per stream, used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace xserv::tokenizer {

class IncrementalDecoder {
 public:
  static constexpr size_t kMaxWindowTokens = 16;

  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Consumes one id and returns the text that became final (possibly empty).
  std::string Step(uint32_t id);
  // Consumes several ids at once; same result as Step on each, concatenated.
  std::string Step(std::span<const uint32_t> ids);
  // Returns whatever is still held back (incomplete UTF-8 becomes U+FFFD) and resets.
  std::string Flush();

 private:
  void StepBytes(uint32_t id, std::string* out);
  void StepWindow(uint32_t id, std::string* out);

  const Tokenizer& tokenizer_;
  const bool skip_special_tokens_;
  // ByteLevel strategy: bytes not yet emitted (a proper prefix of one UTF-8 character).
  std::string pending_bytes_;
  // Window strategy: ids from the prefix offset on; read_ is where the unread part starts.
  std::vector<uint32_t> window_;
  size_t read_ = 0;
  std::string prefix_text_;  // Decode(window_[0, read_))
};

}  // namespace xserv::tokenizer
