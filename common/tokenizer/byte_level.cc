#include "common/tokenizer/byte_level.h"

#include <array>

#include "common/tokenizer/utf8.h"

namespace xserv::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> char_to_byte{};  // every mapped character is below U+0200

  Tables() {
    char_to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100.. in order.
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
    }
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(byte_to_char[b], &byte_to_utf8[b]);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

std::string_view ByteToUnicodeUtf8(uint8_t byte) { return GetTables().byte_to_utf8[byte]; }

void AppendByteLevelEncoded(std::string_view raw, std::string* out) {
  const Tables& t = GetTables();
  for (char c : raw) out->append(t.byte_to_utf8[static_cast<uint8_t>(c)]);
}

std::optional<uint8_t> UnicodeToByte(char32_t c) {
  if (c >= 512) return std::nullopt;
  const int16_t b = GetTables().char_to_byte[c];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

void AppendByteLevelDecoded(std::string_view token, std::string* out) {
  const Tables& t = GetTables();
  const size_t mark = out->size();
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Char c = DecodeUtf8Char(token, i);
    const int16_t b = (c.valid && c.code_point < 512) ? t.char_to_byte[c.code_point] : -1;
    if (b < 0) {
      out->resize(mark);
      out->append(token);
      return;
    }
    out->push_back(static_cast<char>(b));
    i += c.length;
  }
}

}  // namespace xserv::tokenizer
