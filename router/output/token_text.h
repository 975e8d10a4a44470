// Per-token text for OpenAI logprobs: `logprobs.content[].token` (a string) and `.bytes` (the
// token's raw UTF-8 bytes, which may be part of a character), also used for top_logprobs.
//
// Pure functions over an immutable Tokenizer: safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace xserv::router::output {

struct TokenText {
  // Valid UTF-8: the token decoded on its own (HF Decode([id]) with special tokens kept); bytes
  // that are only part of a character become U+FFFD, as in vLLM.
  std::string text;
  // The token's raw bytes (ByteLevel tokenizers: the bytes the token stands for; added tokens:
  // their content; <0xNN> byte-fallback tokens: that byte). Not necessarily valid UTF-8: render
  // as a JSON array of integers.
  std::string bytes;
};

// Unknown ids give empty text and bytes.
TokenText RenderTokenText(const tokenizer::Tokenizer& tokenizer, uint32_t id);

}  // namespace xserv::router::output
