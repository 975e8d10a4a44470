#include "common/tokenizer/normalizer.h"

#include <cstdlib>
#include <vector>

#include "common/tokenizer/utf8.h"
#include "utf8proc.h"

namespace xserv::tokenizer {
namespace {

bool HasDecomposition(int32_t cp) {
  return utf8proc_get_property(cp)->decomp_seqindex != UINT16_MAX ||
         (cp >= 0xAC00 && cp <= 0xD7A3);
}

bool NfcOfCharIsItself(int32_t cp) {
  std::string utf8;
  AppendUtf8(static_cast<char32_t>(cp), &utf8);
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                   static_cast<utf8proc_ssize_t>(utf8.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const bool same = n >= 0 && std::string_view(reinterpret_cast<const char*>(result),
                                               static_cast<size_t>(n)) == utf8;
  std::free(result);
  return same;
}

// One bit per BMP code point: set when the character alone is NFC-invariant, has combining class
// 0 and never appears after the first position of a canonical decomposition (so it can never
// compose with what precedes it). A string made only of such characters is already NFC.
class NfcStableTable {
 public:
  NfcStableTable() : bits_(0x10000 / 64, ~uint64_t{0}) {
    std::vector<bool> second(0x10000, false);
    for (int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (!HasDecomposition(cp)) continue;
      utf8proc_int32_t buf[32];
      int last_boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE,
                                                         &last_boundclass);
      for (utf8proc_ssize_t k = 1; k < n && k < 32; ++k) {
        if (buf[k] < 0x10000) second[buf[k]] = true;
      }
    }
    for (int32_t cp = 0x80; cp < 0x10000; ++cp) {
      bool stable = !(cp >= 0xD800 && cp <= 0xDFFF) && !second[cp];
      if (stable) {
        const utf8proc_property_t* prop = utf8proc_get_property(cp);
        stable = prop->combining_class == 0;
      }
      if (stable && HasDecomposition(cp)) {
        // Precomposed characters must come back unchanged from NFC; singletons (U+212B) and
        // excluded compositions (U+0958, U+0F73) do not.
        stable = NfcOfCharIsItself(cp);
      }
      if (!stable) bits_[cp >> 6] &= ~(uint64_t{1} << (cp & 63));
    }
  }

  bool IsStable(char32_t cp) const {
    if (cp < 0x10000) return (bits_[cp >> 6] >> (cp & 63)) & 1;
    // Outside the BMP: stable when the character takes no part in normalization at all.
    const utf8proc_property_t* prop = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    return prop->combining_class == 0 && prop->decomp_seqindex == UINT16_MAX &&
           prop->comb_index == UINT16_MAX;
  }

 private:
  std::vector<uint64_t> bits_;
};

const NfcStableTable& StableTable() {
  static const NfcStableTable table;
  return table;
}

int FormOptions(UnicodeForm form) {
  switch (form) {
    case UnicodeForm::kNfc: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case UnicodeForm::kNfd: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case UnicodeForm::kNfkc: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case UnicodeForm::kNfkd: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

bool IsNfcQuickStable(std::string_view text) {
  const NfcStableTable& table = StableTable();
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Char c = DecodeUtf8Char(text, i);
    if (!c.valid || !table.IsStable(c.code_point)) return false;
    i += c.length;
  }
  return true;
}

std::string_view Normalizer::Normalize(std::string_view text, std::string* storage) const {
  // Every Unicode form leaves ASCII unchanged; NFC also leaves "quick-stable" text unchanged.
  if (forms_.empty() || IsAscii(text)) return text;
  std::string_view current = text;
  for (UnicodeForm form : forms_) {
    if (form == UnicodeForm::kNfc && IsNfcQuickStable(current)) continue;
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &result,
                     static_cast<utf8proc_option_t>(FormOptions(form)));
    if (n < 0) {  // only on invalid UTF-8, which callers never pass; keep the text as is
      std::free(result);
      continue;
    }
    std::string next(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
    *storage = std::move(next);
    current = *storage;
  }
  return current;
}

}  // namespace xserv::tokenizer
