// HarmonyParser: gpt-oss "harmony" output -> reasoning_content, content and tool calls.
//
// The prompt ends with "<|start|>assistant", so output begins inside a message header:
//   <|channel|>analysis<|message|>...<|end|>
//   <|start|>assistant<|channel|>final<|message|>...<|return|>
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
// A header is everything between <|start|> (or the start of output) and <|message|>: the role,
// an optional recipient "to=NAME" (before or after <|channel|>), the channel's name and an
// optional content type (after <|constrain|>, or a bare word such as "json").
// Routing of a message body:
//   - recipient present (any channel): a tool call; "functions.NAME" is reported as NAME and the
//     body streams as its arguments string;
//   - analysis channel: reasoning;
//   - final, commentary without recipient (a preamble) or any other channel: content.
// Control tokens never appear in any stream; header text is never emitted; text outside a
// message (after <|end|> and before the next <|start|>, or after <|return|>) is dropped.
// Malformed sequences are tolerated: <|start|> or <|channel|> inside a body begins a new header.
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

class HarmonyParser final : public ReasoningParser {
 public:
  // Ids of the harmony control tokens (gpt-oss: 200006, 200005, 200003, 200008, 200007, 200012,
  // 200002), resolved by their strings.
  struct Markers {
    uint32_t start = 0;      // <|start|>
    uint32_t channel = 0;    // <|channel|>
    uint32_t constrain = 0;  // <|constrain|>
    uint32_t message = 0;    // <|message|>
    uint32_t end = 0;        // <|end|>
    uint32_t call = 0;       // <|call|>
    uint32_t return_ = 0;    // <|return|>
  };
  // Header text kept per message; a longer header is truncated (the model is misbehaving).
  static constexpr size_t kMaxHeaderBytes = 512;

  // FailedPrecondition when the tokenizer lacks one of the control tokens.
  static absl::StatusOr<Markers> ResolveMarkers(const tokenizer::Tokenizer& tokenizer);

  explicit HarmonyParser(const Markers& markers);

  bool IsMarker(uint32_t id) const override;
  void Feed(uint32_t id, std::string_view text, ParsedDelta* out) override;
  void Finish(std::string_view text, ParsedDelta* out) override;

 private:
  enum class State {
    kHeader,   // between <|start|> (or output start) and <|message|>
    kBody,     // between <|message|> and <|end|> / <|call|> / <|return|>
    kBetween,  // after <|end|> or <|call|>, waiting for <|start|>
    kDone,     // after <|return|>
  };
  enum class HeaderField { kRole, kChannel, kConstrain };
  enum class Route { kReasoning, kContent, kToolCall };

  void OnText(std::string_view text, ParsedDelta* out);
  void BeginHeader(HeaderField field);
  // Parses the header and routes the body that follows.
  void BeginBody(ParsedDelta* out);

  const Markers markers_;
  State state_ = State::kHeader;
  HeaderField field_ = HeaderField::kRole;
  std::string header_role_;     // role and anything before <|channel|>
  std::string header_channel_;  // "analysis", "commentary to=functions.f json", ...
  Route route_ = Route::kContent;
  int num_tool_calls_ = 0;  // tool calls begun so far; the current one is num_tool_calls_ - 1
};

}  // namespace xserv::router::output
