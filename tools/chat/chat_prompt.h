// Chat over a text-only API (xserv's public gRPC Generate takes text or token ids, no messages):
// the conversation rendered client-side in ChatML, the format of Qwen and many other chat models,
// and the answer's <think>...</think> reasoning split from its content as it streams. Pure logic.
#pragma once

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace xserv::tools {

// "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n".
std::string RenderChatMl(const nlohmann::json& messages);

// The end-of-turn marker of RenderChatMl's format (a stop token of the answer).
inline constexpr std::string_view kChatMlEnd = "<|im_end|>";

// Splits streamed answer text into reasoning (inside <think>...</think>) and content, across
// arbitrary chunk boundaries: a possible partial tag at the end of a chunk is held back.
class ThinkSplitter {
 public:
  struct Pieces {
    std::string reasoning;
    std::string content;
  };

  Pieces Feed(std::string_view text);
  // What is still held back, at the end of the stream.
  Pieces Flush();

 private:
  std::string pending_;
  bool in_think_ = false;
};

}  // namespace xserv::tools
