#include "common/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "spdlog/spdlog.h"

namespace xserv::tokenizer {
namespace {

constexpr std::string_view kOnigSpace = "\\s\\x{85}";
constexpr std::string_view kOnigWord = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

// Per-thread PCRE2 scratch: match data with room for the whole-match pair only (groups are never
// read) and a JIT stack large enough for long whitespace runs under `\s+(?!\S)`.
struct ThreadScratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadScratch() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~ThreadScratch() {
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'Q') {  // \Q...\E quotes literally: copy through untouched
        const size_t end = p.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, stop - i));
        i = stop;
        continue;
      }
      if (e == 's' || e == 'w') {
        const std::string_view cls = e == 's' ? kOnigSpace : kOnigWord;
        if (in_class) {
          out.append(cls);
        } else {
          absl::StrAppend(&out, "[", absl::string_view(cls.data(), cls.size()), "]");
        }
        i += 2;
        continue;
      }
      if ((e == 'S' || e == 'W') && !in_class) {
        const std::string_view cls = e == 'S' ? kOnigSpace : kOnigWord;
        absl::StrAppend(&out, "[^", absl::string_view(cls.data(), cls.size()), "]");
        i += 2;
        continue;
      }
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? i + 1 : end + 2;
      out.append(p.substr(i, stop - i));
      i = stop;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
    ++i;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, Kind kind) {
  std::unique_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  const std::string translated =
      kind == Kind::kLiteral ? std::string(pattern) : TranslateOnigurumaPattern(pattern);
  // PCRE2_LITERAL refuses PCRE2_UCP (and needs no character classes anyway).
  const uint32_t options =
      kind == Kind::kLiteral ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                    &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex '", regex->pattern_,
                                                   "' at offset ", error_offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  regex->code_ = code;
  regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  if (!regex->jit_) spdlog::debug("tokenizer: PCRE2 JIT unavailable for '{}'", regex->pattern_);
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::MatchAt(std::string_view subject, size_t start, RegexMatch* match) const {
  ThreadScratch& scratch = Scratch();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = PCRE2_ERROR_NOMATCH;
  if (jit_ && scratch.match_data != nullptr) {
    rc = pcre2_jit_match(code, data, subject.size(), start, 0, scratch.match_data,
                         scratch.context);
  }
  if (!jit_ || rc < PCRE2_ERROR_NOMATCH) {
    // The interpreter has no JIT stack limit; it is the fallback when JIT ran out of stack.
    rc = pcre2_match(code, data, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     scratch.match_data, nullptr);
  }
  if (rc < 0) {
    if (rc != PCRE2_ERROR_NOMATCH) {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true)) {
        spdlog::warn("tokenizer: regex '{}' failed with PCRE2 error {}; rest of input unsplit",
                     pattern_, rc);
      }
    }
    return false;
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
  match->begin = static_cast<uint32_t>(ovector[0]);
  match->end = static_cast<uint32_t>(ovector[1]);
  return true;
}

void Regex::FindAll(std::string_view subject, std::vector<RegexMatch>* out) const {
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= subject.size()) {
    RegexMatch m;
    if (!MatchAt(subject, pos, &m)) return;
    if (m.begin == m.end && have_last && last_end == m.end) {
      // Empty match glued to the previous one: step one character and search again.
      if (pos >= subject.size()) return;
      pos += DecodeUtf8Char(subject, pos).length;
      continue;
    }
    out->push_back(m);
    pos = m.end;
    last_end = m.end;
    have_last = true;
  }
}

}  // namespace xserv::tokenizer
