#include "tools/chat/chat_prompt.h"

#include <algorithm>

namespace xserv::tools {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagLength(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::string RenderChatMl(const nlohmann::json& messages) {
  std::string out;
  for (const nlohmann::json& m : messages) {
    out += "<|im_start|>" + m.value("role", "user") + "\n" + m.value("content", "") +
           std::string(kChatMlEnd) + "\n";
  }
  return out + "<|im_start|>assistant\n";
}

ThinkSplitter::Pieces ThinkSplitter::Feed(std::string_view text) {
  pending_.append(text);
  Pieces out;
  while (true) {
    const std::string_view tag = in_think_ ? kClose : kOpen;
    std::string& sink = in_think_ ? out.reasoning : out.content;
    const size_t at = pending_.find(tag);
    if (at == std::string::npos) {
      const size_t keep = PartialTagLength(pending_, tag);
      sink.append(pending_, 0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    sink.append(pending_, 0, at);
    pending_.erase(0, at + tag.size());
    in_think_ = !in_think_;
  }
}

ThinkSplitter::Pieces ThinkSplitter::Flush() {
  Pieces out;
  (in_think_ ? out.reasoning : out.content) = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace xserv::tools
