// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that matches the way HF tokenizers'
// Oniguruma regexes do, iterated like the `onig` crate's find_iter.
//
// Oniguruma's Unicode \s also matches U+0085 and its \w is letters, marks, numbers and
// connector punctuation; PCRE2's UCP classes differ there, so Compile rewrites \s \S \w \W into
// explicit classes before compiling.
//
// A Regex is immutable after Compile and FindAll may be called from many threads at once (the
// PCRE2 match data and JIT stack are thread-local).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::tokenizer {

struct RegexMatch {
  uint32_t begin;
  uint32_t end;
};

class Regex {
 public:
  enum class Kind { kRegex, kLiteral };

  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern, Kind kind);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the successive non-overlapping matches in `subject` (valid UTF-8) to `out`. An empty
  // match right where the previous match ended is skipped (onig crate semantics).
  void FindAll(std::string_view subject, std::vector<RegexMatch>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  // Returns false when there is no match at or after `start` (or matching failed).
  bool MatchAt(std::string_view subject, size_t start, RegexMatch* match) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so callers need not include pcre2.h
  bool jit_ = false;
};

// Rewrites Oniguruma-flavoured \s \S \w \W into explicit PCRE2 classes (exposed for tests).
std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace xserv::tokenizer
