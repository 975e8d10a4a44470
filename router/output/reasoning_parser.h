// Reasoning parsers: split a model's streamed output into reasoning_content, content and tool
// calls, by model family (Qwen3 <think>...</think>, gpt-oss harmony channels, or none).
//
// Protocol (the OutputPipeline follows it): for every generated id, in order,
//   - if IsMarker(id): the detokenizer is flushed and Feed(id, flushed_text) is called; a marker
//     is never detokenized, so its text never reaches either stream;
//   - otherwise Feed(id, detokenizer.Step(id)).
// Feed handles `text` as ordinary output first and then, for a marker, the marker itself. At the
// end of the stream Finish(detokenizer.Flush()) releases anything held back. Markers are single
// added tokens resolved by their strings through the tokenizer, which is robust: text that merely
// looks like "<think>" but was generated as ordinary tokens is never a marker.
//
// All text a parser emits is a concatenation of slices of its input cut at ASCII bytes, so valid
// UTF-8 in means valid UTF-8 out.
//
// Ownership and threading: a parser borrows nothing after construction (ids are copied out of
// the tokenizer); one parser per request choice, used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace xserv::router::output {

// One streamed fragment of a tool call, shaped like OpenAI's delta.tool_calls[] entries: the
// first fragment of each call carries its name, later ones only append to `arguments`.
struct ToolCallDelta {
  int index = 0;          // 0, 1, ... in order of appearance within the choice
  std::string name = {};  // non-empty only on the first fragment of a call
  std::string arguments = {};  // JSON text to append to the call's arguments string
};

struct ParsedDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;

  // True for ids the parser consumes as structure (never detokenized).
  virtual bool IsMarker(uint32_t id) const = 0;
  // Appends what became known from (`id`, `text`) to `out`; see the protocol above.
  virtual void Feed(uint32_t id, std::string_view text, ParsedDelta* out) = 0;
  // Ends the stream: handles the trailing `text`, then releases everything held back.
  virtual void Finish(std::string_view text, ParsedDelta* out) = 0;
};

enum class ReasoningFormat {
  kNone,     // everything is content
  kQwen3,    // <think>...</think> (Qwen3, QwQ, DeepSeek-R1 style)
  kHarmony,  // gpt-oss harmony channels
};

// "none", "qwen3" (also "deepseek_r1"), "harmony" (also "gpt_oss", "openai_gptoss").
absl::StatusOr<ReasoningFormat> ParseReasoningFormat(std::string_view name);
// From config.json's model_type: qwen3, qwen3_moe, qwen3_next -> kQwen3; gpt_oss -> kHarmony;
// anything else -> kNone.
ReasoningFormat ReasoningFormatForModelType(std::string_view model_type);
std::string_view ReasoningFormatName(ReasoningFormat format);

struct ReasoningParserOptions {
  // Qwen3 format: the prompt already opened a <think> block (templates of "thinking-only" models
  // such as Qwen3-*-Thinking-2507 end the prompt with "<think>\n"), so output starts as reasoning.
  bool starts_in_reasoning = false;
};

// Resolves the format's markers through `tokenizer` (FailedPrecondition when one is missing).
// The tokenizer is only read during the call.
absl::StatusOr<std::unique_ptr<ReasoningParser>> MakeReasoningParser(
    ReasoningFormat format, const tokenizer::Tokenizer& tokenizer,
    const ReasoningParserOptions& options = {});

// Everything is content.
class PassThroughParser final : public ReasoningParser {
 public:
  bool IsMarker(uint32_t) const override { return false; }
  void Feed(uint32_t, std::string_view text, ParsedDelta* out) override {
    out->content.append(text);
  }
  void Finish(std::string_view text, ParsedDelta* out) override { out->content.append(text); }
};

}  // namespace xserv::router::output
