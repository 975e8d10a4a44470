// TokenStream: the cursor over lexer tokens shared by the expression and statement parsers,
// with jinja2-style expectations and error messages carrying line and column.
//
// Internal to the parser; one instance per Parse() call, used by one thread.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/lexer.h"

namespace xserv::chat_template::parse_internal {

// Nesting of statements and expressions beyond this is refused rather than risking the stack.
inline constexpr int kMaxParseDepth = 128;

using Names = std::initializer_list<std::string_view>;

template <typename Range>
inline bool Contains(const Range& names, std::string_view s) {
  for (std::string_view n : names) {
    if (n == s) return true;
  }
  return false;
}

inline std::string Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kData:
      return "template data";
    case TokenKind::kVariableBegin:
      return "'{{'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
      return absl::StrCat("'", t.text, "'");
    case TokenKind::kString:
      return "string literal";
    case TokenKind::kInteger:
      return "integer literal";
    case TokenKind::kFloat:
      return "float literal";
    case TokenKind::kOperator:
      return absl::StrCat("'", t.text, "'");
    case TokenKind::kEof:
      return "end of template";
  }
  return "token";
}

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  // RAII nesting counter.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& PeekAt(size_t k) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const {
    return Cur().kind == TokenKind::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }

  absl::Status ErrorAt(const Token& t, const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat("template syntax error at line ", t.pos.line,
                                                   ", column ", t.pos.column, ": ", message));
  }
  absl::Status Unexpected(const std::string& expected) const {
    return ErrorAt(Cur(), absl::StrCat("expected ", expected, ", got ", Describe(Cur())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", std::string(op), "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Unexpected("end of statement '%}'");
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Unexpected("a name");
    std::string name = Cur().text;
    Advance();
    return name;
  }
  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) return ErrorAt(Cur(), "template nested too deeply");
    return absl::OkStatus();
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace xserv::chat_template::parse_internal
