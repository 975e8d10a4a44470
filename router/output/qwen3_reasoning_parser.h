// Qwen3ReasoningParser: <think>...</think> reasoning blocks (Qwen3; also QwQ / DeepSeek-R1 style).
//
// Rules, applied as a stream (the result never depends on how ids are chunked):
//   - Output that starts with <think> (optionally after ASCII whitespace, which is dropped) is
//     reasoning until </think>; the rest is content. Output that does not is all content: with
//     enable_thinking=false the template puts an empty think block into the prompt.
//   - Newlines around the reasoning are trimmed and newlines right after </think> are stripped,
//     which inverts the template's own rendering of past turns
//     ('<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n')).
//     Trailing newlines of the reasoning are held back until more reasoning text or </think>.
//   - <think> seen but no </think> (the model ran out of tokens): everything is reasoning.
//   - A </think> before any output text (the prompt opened the block) closes reasoning; markers
//     anywhere else are kept as literal text of the stream they appear in.
// The markers are the tokenizer's added tokens "<think>" and "</think>" (151667 / 151668 in Qwen3).
//
// Ownership and threading: see reasoning_parser.h (one request choice, one thread at a time).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"
#include "router/output/reasoning_parser.h"

namespace xserv::router::output {

class Qwen3ReasoningParser final : public ReasoningParser {
 public:
  struct Markers {
    uint32_t think_start_id = 0;
    uint32_t think_end_id = 0;
    std::string think_start = "<think>";
    std::string think_end = "</think>";
  };

  // FailedPrecondition when the tokenizer has no single token for "<think>" or "</think>".
  static absl::StatusOr<Markers> ResolveMarkers(const tokenizer::Tokenizer& tokenizer);

  Qwen3ReasoningParser(Markers markers, bool starts_in_reasoning);

  bool IsMarker(uint32_t id) const override {
    return id == markers_.think_start_id || id == markers_.think_end_id;
  }
  void Feed(uint32_t id, std::string_view text, ParsedDelta* out) override;
  void Finish(std::string_view text, ParsedDelta* out) override;

 private:
  enum class State {
    kStart,      // only ASCII whitespace so far; waiting for <think> or other text
    kReasoning,  // inside <think>
    kContent,    // after </think>, or output without a think block
  };

  void OnText(std::string_view text, ParsedDelta* out);
  void OnReasoningText(std::string_view text, ParsedDelta* out);
  void OnContentText(std::string_view text, ParsedDelta* out);

  const Markers markers_;
  State state_;
  std::string leading_whitespace_;      // kStart: dropped if <think> follows
  bool reasoning_started_ = false;      // a non-newline reasoning byte was emitted
  size_t held_newlines_ = 0;            // trailing '\n' of the reasoning not yet emitted
  bool strip_content_newlines_ = false;  // right after </think>, until the first other byte
};

}  // namespace xserv::router::output
