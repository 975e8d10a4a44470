// Lexer: turns template source into tokens with jinja2's exact whitespace rules
// (`-`/`+` markers, trim_blocks, lstrip_blocks, newline normalisation, dropped trailing newline).
//
// Pure function of its input; thread-safe. Errors carry the 1-based line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::chat_template {

struct SourcePos {
  int line = 1;
  int column = 1;
};

enum class TokenKind : uint8_t {
  kData,           // literal template text (already whitespace-controlled)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // text holds the unescaped value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text holds the operator: + - * / // % ** ~ ( ) [ ] { } == != < <= > >= = . : | ,
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop whitespace before a block/comment tag that starts a line
  bool keep_trailing_newline = false;
};

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace xserv::chat_template
