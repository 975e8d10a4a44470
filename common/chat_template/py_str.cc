#include "common/chat_template/py_str.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/tokenizer/utf8.h"

namespace xserv::chat_template::py {
namespace {

bool InChars(uint32_t cp, const std::vector<uint32_t>& set) {
  for (uint32_t c : set) {
    if (c == cp) return true;
  }
  return false;
}

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) cps.push_back(DecodeUtf8(s, &pos));
  return cps;
}

// Python's isprintable(): everything except categories Cc Cf Cs Co Cn Zl Zp Zs (space allowed).
bool IsPrintable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool IsCased(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

uint32_t ToUpperCp(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t ToLowerCp(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t ToTitleCp(uint32_t cp) {
  if (cp < 0x80) return ToUpperCp(cp);
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    uint32_t cp = DecodeUtf8(s, &pos);
    uint32_t mapped = f(cp);
    if (mapped == cp) {
      out.append(s.substr(start, pos - start));  // keeps invalid bytes as they were
    } else {
      tokenizer::AppendUtf8(mapped, &out);
    }
  }
  return out;
}

void AppendHex(std::string* out, const char* prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*x", digits, v);
  out->append(prefix);
  out->append(buf);
}

// Splits on whitespace runs from the left, at most `maxsplit` times.
std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    // Skip leading whitespace.
    size_t word_start = pos;
    while (word_start < s.size()) {
      size_t next = word_start;
      if (!IsSpace(DecodeUtf8(s, &next))) break;
      word_start = next;
    }
    if (word_start >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      // The remainder is kept as is, trailing whitespace included (CPython behaviour).
      parts.emplace_back(s.substr(word_start));
      return parts;
    }
    size_t word_end = word_start;
    while (word_end < s.size()) {
      size_t next = word_end;
      if (IsSpace(DecodeUtf8(s, &next))) break;
      word_end = next;
    }
    parts.emplace_back(s.substr(word_start, word_end - word_start));
    pos = word_end;
  }
  return parts;
}

}  // namespace

uint32_t DecodeUtf8(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = *pos;
  unsigned char c = p[i];
  if (c < 0x80) {
    *pos = i + 1;
    return c;
  }
  int len = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  }
  if (len == 0 || i + len > s.size()) {
    *pos = i + 1;
    return c;
  }
  for (int k = 1; k < len; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) {
      *pos = i + 1;
      return c;
    }
    cp = (cp << 6) | (p[i + k] & 0x3F);
  }
  *pos = i + len;
  return cp;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    DecodeUtf8(s, &pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    DecodeUtf8(s, &pos);
    ++n;
  }
  return n;
}

bool IsSpace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  std::vector<uint32_t> set;
  if (chars) set = Decode(*chars);
  auto strip_cp = [&](uint32_t cp) { return chars ? InChars(cp, set) : IsSpace(cp); };
  std::vector<size_t> offs = CodePointOffsets(s);
  size_t n = offs.size() - 1;
  size_t b = 0;
  size_t e = n;
  auto cp_at = [&](size_t k) {
    size_t p = offs[k];
    return DecodeUtf8(s, &p);
  };
  if (left) {
    while (b < e && strip_cp(cp_at(b))) ++b;
  }
  if (right) {
    while (e > b && strip_cp(cp_at(e - 1))) --e;
  }
  return std::string(s.substr(offs[b], offs[e] - offs[b]));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  if (!sep) return SplitWhitespace(s, maxsplit);
  std::vector<std::string> parts;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(*sep, pos);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  parts.emplace_back(s.substr(pos));
  return parts;
}

std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  if (maxsplit < 0) return Split(s, sep, -1);
  std::vector<std::string> parts;
  if (!sep) {
    // Whitespace rsplit: mirror of SplitWhitespace from the right.
    std::vector<size_t> offs = CodePointOffsets(s);
    auto cp_at = [&](size_t k) {
      size_t p = offs[k];
      return DecodeUtf8(s, &p);
    };
    size_t e = offs.size() - 1;
    while (true) {
      while (e > 0 && IsSpace(cp_at(e - 1))) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.emplace_back(s.substr(0, offs[e]));
        break;
      }
      size_t b = e;
      while (b > 0 && !IsSpace(cp_at(b - 1))) --b;
      parts.emplace_back(s.substr(offs[b], offs[e] - offs[b]));
      e = b;
    }
  } else {
    size_t end = s.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
  }
  return std::vector<std::string>(parts.rbegin(), parts.rend());
}

std::string Replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    std::vector<size_t> offs = CodePointOffsets(s);
    int64_t done = 0;
    size_t n = offs.size() - 1;
    for (size_t k = 0; k <= n; ++k) {
      if (count < 0 || done < count) {
        out.append(new_sub);
        ++done;
      }
      if (k < n) out.append(s.substr(offs[k], offs[k + 1] - offs[k]));
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_sub, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_sub);
    pos = hit + old_sub.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string Upper(std::string_view s) { return MapCodePoints(s, ToUpperCp); }
std::string Lower(std::string_view s) { return MapCodePoints(s, ToLowerCp); }

std::string Title(std::string_view s) {
  bool previous_is_cased = false;
  return MapCodePoints(s, [&](uint32_t cp) {
    uint32_t r = previous_is_cased ? ToLowerCp(cp) : ToTitleCp(cp);
    previous_is_cased = IsCased(cp);
    return r;
  });
}

std::string Capitalize(std::string_view s) {
  bool first = true;
  return MapCodePoints(s, [&](uint32_t cp) {
    uint32_t r = first ? ToTitleCp(cp) : ToLowerCp(cp);
    first = false;
    return r;
  });
}

bool IsAlpha(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool IsUpperCp(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_LU;
}
bool IsLowerCp(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_LL;
}

std::string Repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    uint32_t cp = DecodeUtf8(s, &pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp < 0x20 || cp == 0x7F) {
      AppendHex(&out, "\\x", cp, 2);
    } else if (cp < 0x7F) {
      out.push_back(static_cast<char>(cp));
    } else if (IsPrintable(cp)) {
      out.append(s.substr(start, pos - start));
    } else if (cp <= 0xFF) {
      AppendHex(&out, "\\x", cp, 2);
    } else if (cp <= 0xFFFF) {
      AppendHex(&out, "\\u", cp, 4);
    } else {
      AppendHex(&out, "\\U", cp, 8);
    }
  }
  out.push_back(quote);
  return out;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exp);
  int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (n <= exp + 1) {
        out.append(digits);
        out.append(static_cast<size_t>(exp + 1 - n), '0');
        out.append(".0");
      } else {
        out.append(digits.substr(0, static_cast<size_t>(exp + 1)));
        out.push_back('.');
        out.append(digits.substr(static_cast<size_t>(exp + 1)));
      }
    } else {
      out.append("0.");
      out.append(static_cast<size_t>(-exp - 1), '0');
      out.append(digits);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (n > 1) {
    out.push_back('.');
    out.append(digits.substr(1));
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out.append(ebuf);
  return out;
}

void AppendJsonString(std::string* out, std::string_view s, bool ensure_ascii) {
  out->push_back('"');
  size_t pos = 0;
  while (pos < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[pos]);
    switch (c) {
      case '"':
        out->append("\\\"");
        ++pos;
        continue;
      case '\\':
        out->append("\\\\");
        ++pos;
        continue;
      case '\n':
        out->append("\\n");
        ++pos;
        continue;
      case '\r':
        out->append("\\r");
        ++pos;
        continue;
      case '\t':
        out->append("\\t");
        ++pos;
        continue;
      case '\b':
        out->append("\\b");
        ++pos;
        continue;
      case '\f':
        out->append("\\f");
        ++pos;
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
      AppendHex(out, "\\u", c, 4);
      ++pos;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      out->push_back(static_cast<char>(c));
      ++pos;
      continue;
    }
    uint32_t cp = DecodeUtf8(s, &pos);
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      AppendHex(out, "\\u", 0xD800 | (v >> 10), 4);
      AppendHex(out, "\\u", 0xDC00 | (v & 0x3FF), 4);
    } else {
      AppendHex(out, "\\u", cp, 4);
    }
  }
  out->push_back('"');
}

}  // namespace xserv::chat_template::py
