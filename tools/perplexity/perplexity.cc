#include "tools/perplexity/perplexity.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace xserv::tools {

absl::StatusOr<std::vector<ScoreWindow>> SlidingWindows(int64_t num_tokens, int64_t max_length,
                                                        int64_t stride) {
  if (max_length < 2 || stride < 1 || stride > max_length) {
    return absl::InvalidArgumentError(absl::StrCat("need max_length >= 2 and 1 <= stride <= ",
                                                   "max_length; got ", max_length, " and ",
                                                   stride));
  }
  std::vector<ScoreWindow> windows;
  int64_t previous_end = 1;  // position 0 has no context
  for (int64_t begin = 0; previous_end < num_tokens; begin += stride) {
    const int64_t end = std::min(begin + max_length, num_tokens);
    windows.push_back({.begin = begin, .end = end, .score_begin = std::max(previous_end, begin + 1)});
    previous_end = end;
  }
  return windows;
}

double PerplexityResult::perplexity() const { return std::exp(mean_nll()); }

absl::Status AddWindow(const ScoreWindow& w, std::span<const double> logprobs,
                       PerplexityResult& result) {
  if (static_cast<int64_t>(logprobs.size()) != w.end - w.begin) {
    return absl::InvalidArgumentError(absl::StrCat("window [", w.begin, ", ", w.end, ") got ",
                                                   logprobs.size(), " logprobs"));
  }
  for (int64_t p = w.score_begin; p < w.end; ++p) {
    const double lp = logprobs[static_cast<size_t>(p - w.begin)];
    if (!std::isfinite(lp)) {
      return absl::InvalidArgumentError(absl::StrCat("logprob at position ", p, " is ", lp));
    }
    result.nll_sum -= lp;
    ++result.tokens_scored;
  }
  return absl::OkStatus();
}

}  // namespace xserv::tools
