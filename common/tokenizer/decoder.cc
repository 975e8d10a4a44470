#include "common/tokenizer/decoder.h"

#include <optional>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/utf8.h"

namespace xserv::tokenizer {
namespace {

using Tokens = std::vector<std::string>;

// ByteLevel: all tokens' bytes concatenated, then one lossy UTF-8 decode (so a character split
// across tokens survives), returned as a single string.
Tokens ByteLevelChain(const Tokens& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) AppendByteLevelDecoded(t, &bytes);
  std::string text;
  text.reserve(bytes.size());
  AppendUtf8Lossy(bytes, &text);
  return Tokens{std::move(text)};
}

std::optional<uint8_t> ParseByteToken(const std::string& t) {
  // Exactly "<0xNN>" with two hex digits, like HF's u8::from_str_radix on t[3..5].
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// ByteFallback: runs of <0xNN> tokens become their UTF-8 text, or one U+FFFD per byte when the
// run is not valid UTF-8 (HF's rule, unlike the per-subpart rule of lossy decoding).
Tokens ByteFallbackChain(const Tokens& tokens) {
  Tokens out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (IsValidUtf8(run)) {
      out.push_back(run);
    } else {
      for (size_t k = 0; k < run.size(); ++k) out.emplace_back(kReplacementUtf8);
    }
    run.clear();
  };
  for (const std::string& t : tokens) {
    if (auto b = ParseByteToken(t)) {
      run.push_back(static_cast<char>(*b));
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

Tokens StripChain(const DecoderStep& step, const Tokens& tokens) {
  Tokens out;
  out.reserve(tokens.size());
  std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
  for (const std::string& t : tokens) {
    chars.clear();
    for (size_t i = 0; i < t.size();) {
      const Utf8Char c = DecodeUtf8Char(t, i);
      chars.push_back({i, c.code_point});
      i += c.length;
    }
    size_t start_cut = 0;
    for (size_t i = 0; i < step.strip_start && i < chars.size(); ++i) {
      if (chars[i].second != step.strip_content) break;
      start_cut = i + 1;
    }
    size_t stop_cut = chars.size();
    for (size_t i = 0; i < step.strip_stop && i < chars.size(); ++i) {
      const size_t index = chars.size() - i - 1;
      if (chars[index].second != step.strip_content) break;
      stop_cut = index;
    }
    if (start_cut >= stop_cut) {
      out.emplace_back();
      continue;
    }
    const size_t begin = chars[start_cut].first;
    const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
    out.push_back(t.substr(begin, end - begin));
  }
  return out;
}

Tokens ReplaceChain(const DecoderStep& step, const Tokens& tokens) {
  Tokens out;
  out.reserve(tokens.size());
  std::vector<RegexMatch> matches;
  for (const std::string& t : tokens) {
    matches.clear();
    step.pattern->FindAll(t, &matches);
    std::string replaced;
    size_t prev = 0;
    for (const RegexMatch& m : matches) {
      replaced.append(t, prev, m.begin - prev);
      replaced.append(step.content);
      prev = m.end;
    }
    replaced.append(t, prev, std::string::npos);
    out.push_back(std::move(replaced));
  }
  return out;
}

}  // namespace

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined.push_back(' ');
      joined.append(tokens[i]);
    }
    return joined;
  }
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel:
        tokens = ByteLevelChain(tokens);
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = ByteFallbackChain(tokens);
        break;
      case DecoderStep::Kind::kFuse: {
        std::string fused;
        for (const std::string& t : tokens) fused.append(t);
        tokens = Tokens{std::move(fused)};
        break;
      }
      case DecoderStep::Kind::kStrip:
        tokens = StripChain(step, tokens);
        break;
      case DecoderStep::Kind::kReplace:
        tokens = ReplaceChain(step, tokens);
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text.append(t);
  return text;
}

}  // namespace xserv::tokenizer
