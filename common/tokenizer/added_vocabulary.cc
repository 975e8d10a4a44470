#include "common/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "common/tokenizer/utf8.h"

namespace xserv::tokenizer {
namespace {

// The last character of text[0, end), decoded backwards.
char32_t LastChar(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  return DecodeUtf8Char(text, start).code_point;
}

size_t PrevCharStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  return start;
}

// HF's `\s*$` on text[0, end): start of the trailing whitespace run.
size_t LeftmostSpaceAtEnd(std::string_view text, size_t end) {
  size_t pos = end;
  while (pos > 0) {
    const size_t start = PrevCharStart(text, pos);
    if (!IsUnicodeWhitespace(DecodeUtf8Char(text, start).code_point)) break;
    pos = start;
  }
  return pos;
}

// HF's `^\s*` on text[begin, ...): end of the leading whitespace run.
size_t RightmostSpaceAtStart(std::string_view text, size_t begin) {
  size_t pos = begin;
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8Char(text, pos);
    if (!IsUnicodeWhitespace(c.code_point)) break;
    pos += c.length;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<std::string>& patterns,
                                     std::vector<AddedToken> tokens) {
  nodes_.emplace_back();
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int32_t node = 0;
    for (char ch : p) {
      const auto b = static_cast<uint8_t>(ch);
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, INT32_MIN));
      if (it != children.end() && it->first == b) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(nodes_.size());
        children.insert(it, {b, child});
        nodes_.emplace_back();
        node = child;
      }
    }
    // The first token with a given pattern wins (AhoCorasick reports the lowest pattern id).
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(tokens[i]);
    }
  }
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, INT32_MIN));
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *length = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<AddedSplit>* out) const {
  const auto n = static_cast<uint32_t>(text.size());
  size_t start_offset = 0;  // end of what has been emitted so far
  size_t search = 0;        // where the matcher resumes (after the last raw match)
  while (!tokens_.empty() && search < n) {
    if (!first_byte_[static_cast<uint8_t>(text[search])]) {
      ++search;
      continue;
    }
    size_t length = 0;
    const int32_t index = LongestAt(text, search, &length);
    if (index < 0) {
      ++search;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = search;
    size_t stop = search + length;
    search = stop;
    if (token.single_word) {
      const bool start_space = start == 0 || !IsWordChar(LastChar(text, start));
      const bool stop_space = stop == n || !IsWordChar(DecodeUtf8Char(text, stop).code_point);
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(LeftmostSpaceAtEnd(text, start), start_offset);
    if (token.rstrip) stop = RightmostSpaceAtStart(text, stop);
    if (start < start_offset) start = start_offset;  // overlap after an rstrip: never re-emit
    if (start > start_offset) {
      out->push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start), -1});
    }
    out->push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), token.id});
    start_offset = stop;
    search = std::max(search, stop);
  }
  if (start_offset < n) out->push_back({static_cast<uint32_t>(start_offset), n, -1});
}

}  // namespace xserv::tokenizer
