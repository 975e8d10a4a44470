// Sliding-window perplexity, the recipe of HF transformers' perplexity guide: windows of at most
// `max_length` tokens advance by `stride`; each window scores only the tokens the previous one did
// not (its last end - previous end positions), with everything before them in the window as
// context. Position 0 of the text has no context and is never scored. Pure logic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::tools {

struct ScoreWindow {
  int64_t begin = 0;        // first token of the window (context start)
  int64_t end = 0;          // one past its last token
  int64_t score_begin = 0;  // first position scored here (>= 1, >= begin + 1)
};

// InvalidArgument unless 1 <= stride <= max_length and max_length >= 2.
absl::StatusOr<std::vector<ScoreWindow>> SlidingWindows(int64_t num_tokens, int64_t max_length,
                                                        int64_t stride);

struct PerplexityResult {
  int64_t tokens_scored = 0;
  double nll_sum = 0;  // -sum of log p(token | context), nats
  double mean_nll() const { return tokens_scored > 0 ? nll_sum / tokens_scored : 0.0; }
  double perplexity() const;
};

// Adds one window's scores: `logprobs[i]` is log p(token at window.begin + i | window prefix)
// (logprobs[0] unused); the positions [score_begin, end) are taken.
absl::Status AddWindow(const ScoreWindow& window, std::span<const double> logprobs,
                       PerplexityResult& result);

}  // namespace xserv::tools
