#include "common/tokenizer/utf8.h"

#include "utf8proc.h"

namespace xserv::tokenizer {
namespace {

inline bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

Utf8Char DecodeUtf8Char(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true};
  // Table 3-7: the allowed range of the second byte depends on the lead byte; later bytes are
  // always 80..BF. Anything else ends the maximal subpart before the offending byte.
  uint32_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (InRange(b0, 0xC2, 0xDF)) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (InRange(b0, 0xE0, 0xEF)) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (InRange(b0, 0xF0, 0xF4)) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kReplacementChar, 1, false};
  }
  for (uint32_t i = 1; i <= need; ++i) {
    if (i >= avail) return {kReplacementChar, i, false};
    const uint8_t b = p[i];
    const bool ok = (i == 1) ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF);
    if (!ok) return {kReplacementChar, i, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true};
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII runs dominate real text: skip 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Char c = DecodeUtf8Char(s, i);
    if (!c.valid) return false;
    i += c.length;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view s, std::string* out) {
  size_t i = 0;
  const size_t n = s.size();
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one append
  while (i < n) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Char c = DecodeUtf8Char(s, i);
    if (c.valid) {
      i += c.length;
      continue;
    }
    out->append(s.data() + run_start, i - run_start);
    out->append(kReplacementUtf8);
    i += c.length;
    run_start = i;
  }
  out->append(s.data() + run_start, n - run_start);
}

size_t IncompleteUtf8SuffixLength(std::string_view s) {
  // A lead byte within the last 3 bytes whose sequence is valid so far but cut short.
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[n - k]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      const Utf8Char c = DecodeUtf8Char(s, n - k);
      // Invalid only because input ended: the subpart reaches the end of `s`.
      if (!c.valid && c.length == k && k < 4) {
        const bool lead_ok = (b >= 0xC2 && b <= 0xF4);
        return lead_ok ? k : 0;
      }
      return 0;
    }
  }
  return 0;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeWhitespace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace xserv::tokenizer
