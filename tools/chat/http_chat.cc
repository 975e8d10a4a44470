// ChatBackend over an OpenAI-compatible server: streaming /v1/chat/completions; reasoning from
// the server's reasoning_content deltas; token counts from stream_options.include_usage.
#include <utility>

#include "nlohmann/json.hpp"
#include "tools/chat/chat_backend.h"
#include "tools/common/http_client.h"

namespace xserv::tools {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

class HttpChat final : public ChatBackend {
 public:
  HttpChat(ChatOptions options, HttpEndpoint endpoint)
      : options_(std::move(options)), endpoint_(std::move(endpoint)) {}

  Answer Ask(const ChatSession& session, AnswerPrinter& printer) override {
    Answer a;
    SseReader sse;
    std::string error_body;
    const auto start = Clock::now();
    auto on_body = [&](int status, std::string_view bytes) {
      if (status != 200) {
        error_body.append(bytes);
        return true;
      }
      for (const std::string& data : sse.Feed(bytes)) {
        if (data == "[DONE]") return false;
        const Json event = Json::parse(data, nullptr, /*allow_exceptions=*/false);
        if (event.is_discarded()) continue;
        if (event.contains("error")) {
          a.error = event["error"].value("message", data);
          continue;
        }
        if (event.contains("usage") && event["usage"].is_object()) {
          a.prompt_tokens = event["usage"].value("prompt_tokens", 0);
          a.completion_tokens = event["usage"].value("completion_tokens", 0);
        }
        if (!event.contains("choices") || event["choices"].empty()) continue;
        const Json& delta = event["choices"][0]["delta"];
        const std::string reasoning = delta.value("reasoning_content", "");
        const std::string content = delta.value("content", "");
        if ((!reasoning.empty() || !content.empty()) && a.first_token_s < 0) {
          a.first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
        }
        printer.Reasoning(reasoning);
        printer.Content(content);
        a.content += content;
      }
      return true;
    };
    const Json request = session.Request(options_.model, options_.max_tokens, options_.temperature);
    auto response = PostJsonStreaming(endpoint_, "/v1/chat/completions", request.dump(),
                                      options_.api_key, options_.timeout, on_body);
    printer.End();
    a.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!response.ok()) {
      a.error = response.status().ToString();
    } else if (response->status != 200) {
      const Json body = Json::parse(error_body, nullptr, /*allow_exceptions=*/false);
      a.error = body.is_object() && body.contains("error") && body["error"].is_object()
                    ? body["error"].value("message", error_body)
                    : "HTTP " + std::to_string(response->status) + ": " + error_body;
    }
    return a;
  }

 private:
  const ChatOptions options_;
  const HttpEndpoint endpoint_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatBackend>> MakeHttpChat(const ChatOptions& options) {
  absl::StatusOr<HttpEndpoint> endpoint = HttpEndpoint::Parse(options.url);
  if (!endpoint.ok()) return endpoint.status();
  return std::make_unique<HttpChat>(options, *std::move(endpoint));
}

}  // namespace xserv::tools
