#include "router/output/token_text.h"

#include <optional>
#include <string_view>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/utf8.h"

namespace xserv::router::output {
namespace {

bool IsAddedToken(const tokenizer::Tokenizer& tokenizer, uint32_t id) {
  for (const tokenizer::AddedToken& token : tokenizer.added_tokens()) {
    if (token.id == id) return true;
  }
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// SentencePiece byte-fallback pieces are spelled "<0xNN>".
std::optional<char> ByteFallbackValue(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  const int hi = HexValue(token[3]);
  const int lo = HexValue(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<char>(hi * 16 + lo);
}

}  // namespace

TokenText RenderTokenText(const tokenizer::Tokenizer& tokenizer, uint32_t id) {
  TokenText result;
  const std::optional<std::string> token = tokenizer.IdToToken(id);
  if (!token.has_value()) return result;
  const uint32_t ids[] = {id};
  result.text = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
  if (IsAddedToken(tokenizer, id)) {
    result.bytes = *token;
    return result;
  }
  // The decoder's own view of the token is only available as lossy text; recover the exact
  // bytes from the vocabulary string where its decoding is known to agree.
  std::string byte_level;
  tokenizer::AppendByteLevelDecoded(*token, &byte_level);
  std::string byte_level_text;
  tokenizer::AppendUtf8Lossy(byte_level, &byte_level_text);
  if (byte_level_text == result.text) {
    result.bytes = std::move(byte_level);
  } else if (const std::optional<char> byte = ByteFallbackValue(*token); byte.has_value()) {
    result.bytes.assign(1, *byte);
  } else {
    result.bytes = result.text;
  }
  return result;
}

}  // namespace xserv::router::output
