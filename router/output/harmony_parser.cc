#include "router/output/harmony_parser.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace xserv::router::output {
namespace {

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The first whitespace-separated word of `s`.
std::string_view FirstWord(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size() && IsAsciiSpace(s[begin])) ++begin;
  size_t end = begin;
  while (end < s.size() && !IsAsciiSpace(s[end])) ++end;
  return s.substr(begin, end - begin);
}

// The value of a "to=VALUE" word in `s`, or empty.
std::string_view Recipient(std::string_view s) {
  size_t pos = 0;
  while ((pos = s.find("to=", pos)) != std::string_view::npos) {
    if (pos == 0 || IsAsciiSpace(s[pos - 1])) {
      return FirstWord(s.substr(pos + 3));
    }
    pos += 3;
  }
  return {};
}

// Appends at most `cap - out->size()` bytes of `text`, cut at a character boundary (a recipient
// becomes a tool name, which must stay valid UTF-8).
void AppendCapped(std::string_view text, size_t cap, std::string* out) {
  if (out->size() >= cap) return;
  size_t n = cap - out->size();
  if (n < text.size()) {
    while (n > 0 && (static_cast<uint8_t>(text[n]) & 0xC0) == 0x80) --n;
    text = text.substr(0, n);
  }
  out->append(text);
}

}  // namespace

absl::StatusOr<HarmonyParser::Markers> HarmonyParser::ResolveMarkers(
    const tokenizer::Tokenizer& tokenizer) {
  Markers markers;
  const std::pair<const char*, uint32_t*> wanted[] = {
      {"<|start|>", &markers.start},     {"<|channel|>", &markers.channel},
      {"<|constrain|>", &markers.constrain}, {"<|message|>", &markers.message},
      {"<|end|>", &markers.end},         {"<|call|>", &markers.call},
      {"<|return|>", &markers.return_}};
  for (const auto& [text, id] : wanted) {
    const std::optional<uint32_t> found = tokenizer.TokenToId(text);
    if (!found.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the tokenizer has no token \"", text, "\" needed by the harmony parser"));
    }
    *id = *found;
  }
  return markers;
}

HarmonyParser::HarmonyParser(const Markers& markers) : markers_(markers) {}

bool HarmonyParser::IsMarker(uint32_t id) const {
  return id == markers_.start || id == markers_.channel || id == markers_.constrain ||
         id == markers_.message || id == markers_.end || id == markers_.call ||
         id == markers_.return_;
}

void HarmonyParser::BeginHeader(HeaderField field) {
  state_ = State::kHeader;
  field_ = field;
  header_role_.clear();
  header_channel_.clear();
}

void HarmonyParser::Feed(uint32_t id, std::string_view text, ParsedDelta* out) {
  OnText(text, out);
  if (state_ == State::kDone) return;
  if (id == markers_.start) {
    BeginHeader(HeaderField::kRole);
  } else if (id == markers_.channel) {
    if (state_ == State::kHeader) {
      field_ = HeaderField::kChannel;
    } else {
      BeginHeader(HeaderField::kChannel);
    }
  } else if (id == markers_.constrain) {
    if (state_ == State::kHeader) field_ = HeaderField::kConstrain;
  } else if (id == markers_.message) {
    if (state_ == State::kHeader) BeginBody(out);
  } else if (id == markers_.end || id == markers_.call) {
    state_ = State::kBetween;
  } else if (id == markers_.return_) {
    state_ = State::kDone;
  }
}

void HarmonyParser::Finish(std::string_view text, ParsedDelta* out) {
  OnText(text, out);
  state_ = State::kDone;
}

void HarmonyParser::BeginBody(ParsedDelta* out) {
  state_ = State::kBody;
  std::string_view recipient = Recipient(header_channel_);
  if (recipient.empty()) recipient = Recipient(header_role_);
  const std::string_view channel = FirstWord(header_channel_);
  if (!recipient.empty()) {
    route_ = Route::kToolCall;
    std::string_view name = recipient;
    if (name.starts_with("functions.") && name.size() > 10) name.remove_prefix(10);
    ToolCallDelta call;
    call.index = num_tool_calls_;
    call.name.assign(name);
    out->tool_calls.push_back(std::move(call));
    ++num_tool_calls_;
  } else if (channel == "analysis") {
    route_ = Route::kReasoning;
  } else {
    route_ = Route::kContent;
  }
}

void HarmonyParser::OnText(std::string_view text, ParsedDelta* out) {
  if (text.empty()) return;
  switch (state_) {
    case State::kHeader:
      if (field_ == HeaderField::kRole) AppendCapped(text, kMaxHeaderBytes, &header_role_);
      if (field_ == HeaderField::kChannel) AppendCapped(text, kMaxHeaderBytes, &header_channel_);
      return;
    case State::kBody:
      switch (route_) {
        case Route::kReasoning:
          out->reasoning.append(text);
          return;
        case Route::kContent:
          out->content.append(text);
          return;
        case Route::kToolCall: {
          const int index = num_tool_calls_ - 1;
          if (out->tool_calls.empty() || out->tool_calls.back().index != index) {
            ToolCallDelta call;
            call.index = index;
            out->tool_calls.push_back(std::move(call));
          }
          out->tool_calls.back().arguments.append(text);
          return;
        }
      }
      return;
    case State::kBetween:
    case State::kDone:
      return;
  }
}

}  // namespace xserv::router::output
