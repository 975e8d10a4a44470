#include "common/chat_template/lexer.h"
#include "common/tokenizer/utf8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/py_str.h"

namespace xserv::chat_template {
namespace {

// jinja2 first rewrites "\r\n" and "\r" to "\n" and, unless keep_trailing_newline, drops one
// trailing newline.
std::string NormalizeNewlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsAllSpace(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (!py::IsSpace(py::DecodeUtf8(s, &pos))) return false;
  }
  return true;
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        EmitData(src_.substr(pos), pos);
        break;
      }
      const char type = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < n && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string text = src_.substr(pos, tag - pos);
      size_t raw_body = 0;
      const bool is_raw = type == '%' && MatchRawBegin(after, &raw_body);
      ApplyLeftStrip(&text, sign, /*is_variable=*/type == '{', line_starting);
      EmitData(std::move(text), pos);
      if (is_raw) {
        absl::Status s = LexRaw(raw_body, &pos, &line_starting);
        if (!s.ok()) return s;
      } else if (type == '#') {
        absl::Status s = LexComment(tag, after, &pos, &line_starting);
        if (!s.ok()) return s;
      } else {
        absl::Status s = LexTag(tag, after, type == '%', &pos, &line_starting);
        if (!s.ok()) return s;
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.pos = PosOf(n);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  SourcePos PosOf(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    SourcePos p;
    p.line = static_cast<int>(line);
    p.column = static_cast<int>(offset - line_starts_[line - 1]) + 1;
    return p;
  }

  absl::Status Error(size_t offset, const std::string& message) const {
    SourcePos p = PosOf(offset);
    return absl::InvalidArgumentError(absl::StrCat("template syntax error at line ", p.line,
                                                   ", column ", p.column, ": ", message));
  }

  size_t FindTagStart(size_t from) const {
    size_t pos = from;
    while (true) {
      size_t brace = src_.find('{', pos);
      if (brace == std::string::npos || brace + 1 >= src_.size()) return std::string::npos;
      char c = src_[brace + 1];
      if (c == '{' || c == '%' || c == '#') return brace;
      pos = brace + 1;
    }
  }

  // The text before a tag loses trailing whitespace for `{%-`, or, with lstrip_blocks, the
  // indentation of a block/comment tag that is alone at the start of its line.
  void ApplyLeftStrip(std::string* text, char sign, bool is_variable, bool line_starting) const {
    if (sign == '-') {
      *text = py::Strip(*text, std::nullopt, /*left=*/false, /*right=*/true);
      return;
    }
    if (sign == '+' || !options_.lstrip_blocks || is_variable) return;
    size_t nl = text->rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    std::string_view tail = std::string_view(*text).substr(l_pos);
    if (!tail.empty() && IsAllSpace(tail)) text->resize(l_pos);
  }

  void EmitData(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kData;
    t.text = std::move(text);
    t.pos = PosOf(offset);
    tokens_.push_back(std::move(t));
  }

  void EmitSimple(TokenKind kind, size_t offset) {
    Token t;
    t.kind = kind;
    t.pos = PosOf(offset);
    tokens_.push_back(std::move(t));
  }

  size_t SkipSpace(size_t p) const {
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    return p;
  }

  // `{% raw %}`: `\s*raw\s*` then `-%}` (which eats following whitespace) or `%}`.
  bool MatchRawBegin(size_t after, size_t* body) const {
    size_t p = SkipSpace(after);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = SkipSpace(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      *body = SkipSpace(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *body = p + 2;
      return true;
    }
    return false;
  }

  absl::Status LexRaw(size_t body, size_t* pos, bool* line_starting) {
    *line_starting = body > 0 && src_[body - 1] == '\n';
    size_t search = body;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error(body, "missing end of raw directive");
      size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = SkipSpace(p);
      if (src_.compare(p, 6, "endraw") == 0) {
        p = SkipSpace(p + 6);
        size_t end = std::string::npos;
        if (src_.compare(p, 3, "+%}") == 0) {
          end = p + 3;
        } else if (src_.compare(p, 3, "-%}") == 0) {
          end = SkipSpace(p + 3);
        } else if (src_.compare(p, 2, "%}") == 0) {
          end = p + 2;
          if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
        }
        if (end != std::string::npos) {
          std::string text = src_.substr(body, open - body);
          ApplyLeftStrip(&text, sign, false, *line_starting);
          EmitData(std::move(text), body);
          *pos = end;
          *line_starting = src_[end - 1] == '\n';
          return absl::OkStatus();
        }
      }
      search = open + 2;
    }
  }

  absl::Status LexComment(size_t tag, size_t after, size_t* pos, bool* line_starting) {
    size_t close = src_.find("#}", after);
    if (close == std::string::npos) return Error(tag, "missing end of comment tag");
    char sign =
        (close > after && (src_[close - 1] == '-' || src_[close - 1] == '+')) ? src_[close - 1] : 0;
    size_t end = close + 2;
    if (sign == '-') {
      end = SkipSpaceUnicode(end);
    } else if (sign != '+' && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *pos = end;
    *line_starting = src_[end - 1] == '\n';
    return absl::OkStatus();
  }

  // `-%}` and `-}}` eat `\s*`, which in Python's re is Unicode whitespace.
  size_t SkipSpaceUnicode(size_t p) const {
    while (p < src_.size()) {
      size_t next = p;
      if (!py::IsSpace(py::DecodeUtf8(src_, &next))) break;
      p = next;
    }
    return p;
  }

  // Returns the end offset when an end marker starts at p, npos otherwise.
  size_t MatchTagEnd(size_t p, bool block) const {
    const char* close = block ? "%}" : "}}";
    if (block && src_[p] == '+' && src_.compare(p + 1, 2, close) == 0) return p + 3;
    if (src_[p] == '-' && src_.compare(p + 1, 2, close) == 0) return SkipSpaceUnicode(p + 3);
    if (src_.compare(p, 2, close) == 0) {
      size_t end = p + 2;
      if (block && options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      return end;
    }
    return std::string::npos;
  }

  absl::Status LexTag(size_t tag, size_t after, bool block, size_t* pos, bool* line_starting) {
    EmitSimple(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, tag);
    std::vector<char> balance;
    size_t p = after;
    const size_t n = src_.size();
    while (true) {
      if (p >= n) {
        return Error(tag, block ? "unexpected end of template, missing '%}'"
                                : "unexpected end of template, missing '}}'");
      }
      if (balance.empty()) {
        size_t end = MatchTagEnd(p, block);
        if (end != std::string::npos) {
          EmitSimple(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, p);
          *pos = end;
          *line_starting = src_[end - 1] == '\n';
          return absl::OkStatus();
        }
      }
      char c = src_[p];
      if (IsAsciiSpace(c)) {
        ++p;
        continue;
      }
      absl::Status s;
      if (IsDigit(c)) {
        s = LexNumber(&p);
      } else if (IsNameStart(c)) {
        size_t start = p;
        while (p < n && IsNameChar(src_[p])) ++p;
        Token t;
        t.kind = TokenKind::kName;
        t.text = src_.substr(start, p - start);
        t.pos = PosOf(start);
        tokens_.push_back(std::move(t));
      } else if (c == '\'' || c == '"') {
        s = LexString(&p);
      } else {
        s = LexOperator(&p, &balance);
      }
      if (!s.ok()) return s;
    }
  }

  absl::Status LexNumber(size_t* p) {
    const size_t start = *p;
    size_t q = start;
    auto digits = [&](size_t at) {
      size_t r = at;
      if (r >= src_.size() || !IsDigit(src_[r])) return at;
      while (r < src_.size() && (IsDigit(src_[r]) ||
                                 (src_[r] == '_' && r + 1 < src_.size() && IsDigit(src_[r + 1])))) {
        ++r;
      }
      return r;
    };
    Token t;
    t.pos = PosOf(start);
    // Hex/octal/binary integers.
    if (src_[q] == '0' && q + 1 < src_.size() &&
        (src_[q + 1] == 'x' || src_[q + 1] == 'X' || src_[q + 1] == 'o' || src_[q + 1] == 'O' ||
         src_[q + 1] == 'b' || src_[q + 1] == 'B')) {
      int base = (src_[q + 1] == 'x' || src_[q + 1] == 'X')   ? 16
                 : (src_[q + 1] == 'o' || src_[q + 1] == 'O') ? 8
                                                              : 2;
      q += 2;
      uint64_t v = 0;
      size_t digits_start = q;
      while (q < src_.size()) {
        if (src_[q] == '_') {
          ++q;
          continue;
        }
        int d = HexValue(src_[q]);
        if (d < 0 || d >= base) break;
        if (v > (static_cast<uint64_t>(INT64_MAX) - d) / base) {
          return Error(start, "integer literal too large");
        }
        v = v * base + d;
        ++q;
      }
      if (q == digits_start) return Error(start, "invalid integer literal");
      t.kind = TokenKind::kInteger;
      t.int_value = static_cast<int64_t>(v);
      tokens_.push_back(std::move(t));
      *p = q;
      return absl::OkStatus();
    }
    q = digits(q);
    bool is_float = false;
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot) {
      if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
        q = digits(q + 1);
        is_float = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        size_t e_end = digits(r);
        if (e_end != r) {
          q = e_end;
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = start; i < q; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInteger;
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == ERANGE) return Error(start, "integer literal too large");
      t.int_value = v;
    }
    tokens_.push_back(std::move(t));
    *p = q;
    return absl::OkStatus();
  }

  // Python "unicode-escape" decoding of a string literal body.
  absl::Status LexString(size_t* p) {
    const size_t start = *p;
    const char quote = src_[start];
    size_t q = start + 1;
    std::string value;
    while (true) {
      if (q >= src_.size()) return Error(start, "unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) return Error(start, "unterminated string literal");
      char e = src_[q + 1];
      q += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          int len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int k = 0; k < len; ++k) {
            int d = q + k < src_.size() ? HexValue(src_[q + k]) : -1;
            if (d < 0)
              return Error(start, absl::StrCat("truncated \\", std::string(1, e),
                                               " escape in string literal"));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          q += static_cast<size_t>(len);
          // Combine a UTF-16 surrogate pair written as two \u escapes.
          if (cp >= 0xD800 && cp <= 0xDBFF && src_.compare(q, 2, "\\u") == 0) {
            uint32_t lo = 0;
            bool ok = true;
            for (int k = 0; k < 4; ++k) {
              int d = q + 2 + k < src_.size() ? HexValue(src_[q + 2 + k]) : -1;
              if (d < 0) ok = false;
              lo = lo * 16 + static_cast<uint32_t>(std::max(d, 0));
            }
            if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              q += 6;
            }
          }
          if (cp > 0x10FFFF) return Error(start, "invalid \\U escape in string literal");
          tokenizer::AppendUtf8(cp, &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[q++] - '0');
            }
            tokenizer::AppendUtf8(cp, &value);
          } else if (e == 'N') {
            return Error(start, "\\N{...} escapes are not supported");
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(value);
    t.pos = PosOf(start);
    tokens_.push_back(std::move(t));
    *p = q + 1;
    return absl::OkStatus();
  }

  absl::Status LexOperator(size_t* p, std::vector<char>* balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    static constexpr std::string_view kOne = "+-*/%~()[]{}<>=.:|,;";
    const size_t start = *p;
    std::string op;
    for (std::string_view two : kTwo) {
      if (src_.compare(start, 2, two) == 0) op = std::string(two);
    }
    if (op.empty()) {
      char c = src_[start];
      if (kOne.find(c) == std::string_view::npos) {
        return Error(start, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      op = std::string(1, c);
      if (c == '(' || c == '[' || c == '{') {
        balance->push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance->empty()) return Error(start, absl::StrCat("unexpected '", op, "'"));
        if (balance->back() != c) {
          return Error(start, absl::StrCat("unexpected '", op, "', expected '",
                                           std::string(1, balance->back()), "'"));
        }
        balance->pop_back();
      }
    }
    Token t;
    t.kind = TokenKind::kOperator;
    t.text = std::move(op);
    t.pos = PosOf(start);
    *p = start + t.text.size();
    tokens_.push_back(std::move(t));
    return absl::OkStatus();
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(NormalizeNewlines(source, options.keep_trailing_newline), options);
  return lexer.Run();
}

}  // namespace xserv::chat_template
