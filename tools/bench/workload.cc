#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>

namespace xserv::tools {

absl::Status WorkloadParams::Validate() const {
  if (input_len < 1 || output_len < 1) {
    return absl::InvalidArgumentError("input and output lengths must be >= 1");
  }
  if (!(range_ratio >= 0.0 && range_ratio < 1.0)) {
    return absl::InvalidArgumentError("the random range ratio must be in [0, 1)");
  }
  if (vocab_low < 0 || vocab_low >= vocab_high) {
    return absl::InvalidArgumentError("random token ids need 0 <= vocab_low < vocab_high");
  }
  if (!(chars_per_token > 0.0)) return absl::InvalidArgumentError("chars_per_token must be > 0");
  return absl::OkStatus();
}

int DrawLength(int len, double ratio, std::mt19937& rng) {
  const int low = std::max(1, static_cast<int>(std::floor(len * (1.0 - ratio))));
  const int high = std::max(low, static_cast<int>(std::floor(len * (1.0 + ratio))));
  if (low == high) return low;
  return std::uniform_int_distribution<int>(low, high)(rng);
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::string CutText(std::string_view text, size_t num_bytes, std::mt19937& rng) {
  if (text.size() <= num_bytes) return std::string(text);
  size_t begin = std::uniform_int_distribution<size_t>(0, text.size() - num_bytes)(rng);
  // Forward to the start of a word, unless the text has no whitespace left to find.
  if (begin > 0 && !IsSpace(text[begin - 1])) {
    size_t space = begin;
    while (space < text.size() && !IsSpace(text[space])) ++space;
    while (space < text.size() && IsSpace(text[space])) ++space;
    if (space + num_bytes / 2 <= text.size()) begin = space;
  }
  while (begin < text.size() && IsContinuation(text[begin])) ++begin;
  size_t end = std::min(text.size(), begin + num_bytes);
  while (end < text.size() && end > begin && IsContinuation(text[end])) --end;
  return std::string(text.substr(begin, end - begin));
}

std::vector<BenchPrompt> MakePrompts(const WorkloadParams& params, std::string_view text,
                                     int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> id(params.vocab_low, params.vocab_high - 1);
  std::vector<BenchPrompt> prompts(static_cast<size_t>(std::max(count, 0)));
  for (BenchPrompt& p : prompts) {
    p.input_len = DrawLength(params.input_len, params.range_ratio, rng);
    p.output_len = DrawLength(params.output_len, params.range_ratio, rng);
    if (params.dataset == Dataset::kRandom) {
      p.token_ids.resize(static_cast<size_t>(p.input_len));
      for (int& t : p.token_ids) t = id(rng);
    } else {
      const auto bytes = static_cast<size_t>(std::lround(p.input_len * params.chars_per_token));
      p.text = CutText(text, std::max<size_t>(bytes, 1), rng);
    }
  }
  return prompts;
}

}  // namespace xserv::tools
