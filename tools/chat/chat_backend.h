// Where xserv-chat gets its answers: an OpenAI-compatible server (streaming
// /v1/chat/completions) or xserv's public gRPC API (Generate on a ChatML rendering of the
// conversation). Made once in main(); used from the main thread only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/chat/chat_session.h"

namespace xserv::tools {

struct ChatOptions {
  std::string url;  // http://host:port (http) or [grpc://]host:port (grpc)
  std::string api_key, model;
  int max_tokens = 1024;
  double temperature = 0.7;
  std::chrono::seconds timeout{300};
};

// Prints an answer as it streams to stdout: reasoning only with `think` (grey when `colour`),
// then the content.
class AnswerPrinter {
 public:
  AnswerPrinter(bool think, bool colour) : think_(think), colour_(colour) {}
  void Reasoning(std::string_view text);
  void Content(std::string_view text);
  void End();  // resets the colour if reasoning was last

 private:
  const bool think_, colour_;
  bool in_reasoning_ = false;
  bool content_started_ = false;
};

struct Answer {
  std::string content;
  int prompt_tokens = 0, completion_tokens = 0;
  double seconds = 0;         // from the request to the end of the stream
  double first_token_s = -1;  // to the first content or reasoning text
  std::string error;          // server or transport error, if any

  // Generated tokens per second after the first (0 when not measurable).
  double TokensPerSecond() const;
};

class ChatBackend {
 public:
  virtual ~ChatBackend() = default;
  // Streams the answer to the conversation so far through `printer`.
  virtual Answer Ask(const ChatSession& session, AnswerPrinter& printer) = 0;
};

absl::StatusOr<std::unique_ptr<ChatBackend>> MakeHttpChat(const ChatOptions& options);
absl::StatusOr<std::unique_ptr<ChatBackend>> MakeGrpcChat(const ChatOptions& options);

}  // namespace xserv::tools
