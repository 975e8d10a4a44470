// GPT-2's reversible byte <-> printable-character mapping ("bytes_to_unicode"), used by the
// ByteLevel pre-tokenizer (bytes -> characters, e.g. ' ' -> 'Ġ') and decoder (back to bytes).
//
// The tables are built once at static-initialisation time and never change: any thread may call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xserv::tokenizer {

// The character standing for `byte`, UTF-8 encoded (1 or 2 bytes).
std::string_view ByteToUnicodeUtf8(uint8_t byte);

// Appends the byte-level form of `raw` (each byte replaced by its character) to `out`.
void AppendByteLevelEncoded(std::string_view raw, std::string* out);

// The byte a character stands for, if it is one of the 256 mapped characters.
std::optional<uint8_t> UnicodeToByte(char32_t c);

// HF's ByteLevel decoder rule for one token: when every character of `token` is a mapped
// character, appends the bytes they stand for; otherwise appends `token` unchanged (added tokens
// such as "<|im_start|>" take the first branch only because ASCII maps to itself).
void AppendByteLevelDecoded(std::string_view token, std::string* out);

}  // namespace xserv::tokenizer
