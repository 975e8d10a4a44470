#include "router/output/qwen3_reasoning_parser.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace xserv::router::output {
namespace {

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

absl::StatusOr<uint32_t> ResolveSingleToken(const tokenizer::Tokenizer& tokenizer,
                                            const std::string& text) {
  const std::optional<uint32_t> id = tokenizer.TokenToId(text);
  if (!id.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer has no token \"", text, "\" needed by the reasoning parser"));
  }
  return *id;
}

}  // namespace

absl::StatusOr<Qwen3ReasoningParser::Markers> Qwen3ReasoningParser::ResolveMarkers(
    const tokenizer::Tokenizer& tokenizer) {
  Markers markers;
  absl::StatusOr<uint32_t> start = ResolveSingleToken(tokenizer, markers.think_start);
  if (!start.ok()) return start.status();
  absl::StatusOr<uint32_t> end = ResolveSingleToken(tokenizer, markers.think_end);
  if (!end.ok()) return end.status();
  markers.think_start_id = *start;
  markers.think_end_id = *end;
  return markers;
}

Qwen3ReasoningParser::Qwen3ReasoningParser(Markers markers, bool starts_in_reasoning)
    : markers_(std::move(markers)),
      state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}

void Qwen3ReasoningParser::Feed(uint32_t id, std::string_view text, ParsedDelta* out) {
  OnText(text, out);
  if (id == markers_.think_start_id) {
    if (state_ == State::kStart) {
      leading_whitespace_.clear();
      state_ = State::kReasoning;
    } else {
      OnText(markers_.think_start, out);
    }
  } else if (id == markers_.think_end_id) {
    if (state_ == State::kContent) {
      OnText(markers_.think_end, out);
    } else {
      // Closing the block drops the whitespace around the reasoning.
      leading_whitespace_.clear();
      held_newlines_ = 0;
      state_ = State::kContent;
      strip_content_newlines_ = true;
    }
  }
}

void Qwen3ReasoningParser::Finish(std::string_view text, ParsedDelta* out) {
  OnText(text, out);
  if (state_ == State::kStart) {
    out->content.append(leading_whitespace_);
    leading_whitespace_.clear();
  } else if (state_ == State::kReasoning) {
    // Truncated inside the block: what was generated is all reasoning.
    out->reasoning.append(held_newlines_, '\n');
    held_newlines_ = 0;
  }
}

void Qwen3ReasoningParser::OnText(std::string_view text, ParsedDelta* out) {
  if (text.empty()) return;
  switch (state_) {
    case State::kStart: {
      size_t spaces = 0;
      while (spaces < text.size() && IsAsciiSpace(text[spaces])) ++spaces;
      if (spaces == text.size()) {
        leading_whitespace_.append(text);
        return;
      }
      state_ = State::kContent;
      out->content.append(leading_whitespace_);
      leading_whitespace_.clear();
      OnContentText(text, out);
      return;
    }
    case State::kReasoning:
      OnReasoningText(text, out);
      return;
    case State::kContent:
      OnContentText(text, out);
      return;
  }
}

void Qwen3ReasoningParser::OnReasoningText(std::string_view text, ParsedDelta* out) {
  if (!reasoning_started_) {
    const size_t first = text.find_first_not_of('\n');
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
  }
  const size_t last = text.find_last_not_of('\n');
  if (last == std::string_view::npos) {
    held_newlines_ += text.size();
    return;
  }
  reasoning_started_ = true;
  out->reasoning.append(held_newlines_, '\n');
  out->reasoning.append(text.substr(0, last + 1));
  held_newlines_ = text.size() - (last + 1);
}

void Qwen3ReasoningParser::OnContentText(std::string_view text, ParsedDelta* out) {
  if (strip_content_newlines_) {
    const size_t first = text.find_first_not_of('\n');
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
    strip_content_newlines_ = false;
  }
  out->content.append(text);
}

}  // namespace xserv::router::output
