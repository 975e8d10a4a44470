// Python string semantics over UTF-8 std::string: code-point indexing, str.strip/split/
// replace/upper/lower/title, repr() quoting, float repr and json.dumps string escaping.
//
// Templates are Python (jinja2) programs, so every string operation a template can observe must
// follow CPython's rules, not C++'s: lengths and indices count code points, whitespace is Unicode
// whitespace, and numbers print the way repr() prints them. Pure functions; thread-safe.
// Invalid UTF-8 never fails: each invalid byte is treated as one code point and kept as is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xserv::chat_template::py {

// Decodes the code point starting at `s[*pos]` and advances `*pos`. An invalid byte decodes to
// itself (0x80..0xFF) and advances by one.
uint32_t DecodeUtf8(std::string_view s, size_t* pos);

// Byte offsets of every code point start plus a final s.size(); size() - 1 code points.
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);

// Python str.isspace() for one code point.
bool IsSpace(uint32_t cp);

// str.strip/lstrip/rstrip; `chars` == nullopt strips Unicode whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);

// str.split / str.rsplit. `sep` == nullopt splits on runs of whitespace. maxsplit < 0 means
// unlimited. `sep` must not be empty (the caller reports Python's ValueError).
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);

// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code
// points, as CPython does.
std::string Replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
// str.title(): first cased letter after a non-cased character is upper-cased, the rest lowered.
std::string Title(std::string_view s);
// str.capitalize(): first code point upper-cased, the rest lowered.
std::string Capitalize(std::string_view s);
bool IsAlpha(uint32_t cp);
bool IsUpperCp(uint32_t cp);
bool IsLowerCp(uint32_t cp);

// repr(str): quoted with ' unless the string holds ' and no ", escapes as CPython does.
std::string Repr(std::string_view s);

// repr(float) / str(float): shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string FloatRepr(double d);

// Appends s as a JSON string literal the way json.dumps does (ensure_ascii selects \uXXXX
// escapes for non-ASCII, with surrogate pairs above the BMP).
void AppendJsonString(std::string* out, std::string_view s, bool ensure_ascii);

}  // namespace xserv::chat_template::py
