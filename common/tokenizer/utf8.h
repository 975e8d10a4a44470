// UTF-8 helpers shared by the tokenizer: decoding with Unicode's "maximal subpart" error
// recovery (what Python's bytes.decode('utf-8', errors='replace') and Rust's
// String::from_utf8_lossy do), encoding, and the few character classes HF uses outside regexes.
//
// Pure functions, no state: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xserv::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

struct Utf8Char {
  char32_t code_point;  // kReplacementChar when !valid
  uint32_t length;      // bytes consumed, >= 1; for invalid input the maximal invalid subpart
  bool valid;
};

// Decodes the character starting at s[pos] (pos < s.size()). An invalid sequence consumes its
// maximal subpart (Unicode 15, section 3.9, table 3-7), so replacing each invalid Utf8Char by one
// U+FFFD reproduces Python's errors='replace'.
Utf8Char DecodeUtf8Char(std::string_view s, size_t pos);

// Fast check: true when `s` is entirely well-formed UTF-8 (no surrogates, no overlongs).
bool IsValidUtf8(std::string_view s);

// Appends `s` to `out`, replacing every maximal invalid subpart with U+FFFD.
void AppendUtf8Lossy(std::string_view s, std::string* out);

// Length of the longest suffix of `s` that is a proper prefix of some valid multi-byte
// character (0..3). Those bytes may still become a character when more bytes arrive; everything
// before them decodes the same whatever follows. Used by streaming detokenization.
size_t IncompleteUtf8SuffixLength(std::string_view s);

void AppendUtf8(char32_t code_point, std::string* out);

// Rust's char::is_whitespace (Unicode White_Space).
bool IsUnicodeWhitespace(char32_t c);

// Rust regex's \w (alphabetic, marks, decimal digits, connector punctuation, joiners); used for
// added tokens' single_word rule.
bool IsWordChar(char32_t c);

}  // namespace xserv::tokenizer
