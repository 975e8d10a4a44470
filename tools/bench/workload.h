// The prompts of a serving benchmark, apart from any I/O: random token ids, or cuts of a plain
// text at random offsets; input and output lengths fixed or drawn uniformly from
// [len * (1 - r), len * (1 + r)] (vLLM's random dataset). Seeded and deterministic: the same
// parameters and seed give the same prompts. Pure logic.
#pragma once

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace xserv::tools {

enum class Dataset { kRandom, kText };

struct WorkloadParams {
  Dataset dataset = Dataset::kRandom;
  int input_len = 128;       // tokens (text: approximately, through chars_per_token)
  int output_len = 128;      // max_tokens
  double range_ratio = 0.0;  // 0: fixed lengths; in [0, 1)
  int vocab_low = 100, vocab_high = 10000;  // random ids drawn from [low, high)
  double chars_per_token = 4.0;             // text: bytes of text per prompt token

  absl::Status Validate() const;
};

// One request's prompt: token ids (random) or text (text), and its max_tokens.
struct BenchPrompt {
  std::vector<int> token_ids;
  std::string text;
  int input_len = 0;  // the drawn target length in tokens
  int output_len = 0;
};

// A length drawn uniformly from [floor(len * (1 - ratio)), floor(len * (1 + ratio))], at least 1.
int DrawLength(int len, double ratio, std::mt19937& rng);

// About `num_bytes` of `text` from a random offset: starts at a word (after whitespace), never
// splits a UTF-8 character; the whole text when it is not longer than `num_bytes`.
std::string CutText(std::string_view text, size_t num_bytes, std::mt19937& rng);

// `count` prompts for `params` from `seed`; `text` is the corpus of Dataset::kText.
std::vector<BenchPrompt> MakePrompts(const WorkloadParams& params, std::string_view text,
                                     int count, uint32_t seed);

}  // namespace xserv::tools
