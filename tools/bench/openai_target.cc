// BenchTarget over an OpenAI-compatible HTTP server: streaming /v1/completions (token-id or text
// prompts), usage from stream_options.include_usage, token counts from vLLM's /tokenize.
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_target.h"
#include "tools/common/http_client.h"

namespace xserv::tools {
namespace {

using Json = nlohmann::json;

class OpenAiTarget final : public BenchTarget {
 public:
  OpenAiTarget(TargetOptions options, HttpEndpoint endpoint)
      : options_(std::move(options)), endpoint_(std::move(endpoint)) {}

  RequestTiming Send(const BenchPrompt& prompt) override {
    Json request = {{"max_tokens", prompt.output_len},
                    {"temperature", 0},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
    if (prompt.text.empty()) {
      request["prompt"] = prompt.token_ids;
    } else {
      request["prompt"] = prompt.text;
    }
    if (options_.ignore_eos) request["ignore_eos"] = true;
    if (!options_.model.empty()) request["model"] = options_.model;
    SseReader sse;
    StreamTimer timer;
    bool failed = false;
    auto on_body = [&](int status, std::string_view bytes) {
      if (status != 200) {
        failed = true;
        return false;
      }
      for (const std::string& data : sse.Feed(bytes)) {
        if (data == "[DONE]") return false;
        const Json event = Json::parse(data, nullptr, /*allow_exceptions=*/false);
        if (event.is_discarded() || event.contains("error")) {
          failed = true;
          return false;
        }
        if (event.contains("usage") && event["usage"].is_object()) {
          timer.timing().output_tokens = event["usage"].value("completion_tokens", 0);
          timer.timing().prompt_tokens = event["usage"].value("prompt_tokens", 0);
        }
        if (!event.contains("choices") || event["choices"].empty()) continue;
        if (event["choices"][0].value("text", "").empty()) continue;
        timer.Event();
      }
      return true;
    };
    auto response = PostJsonStreaming(endpoint_, "/v1/completions", request.dump(),
                                      options_.api_key, options_.timeout, on_body);
    const bool ok = response.ok() && response->status == 200 && !failed;
    const int events = timer.events();
    RequestTiming t = timer.Finish(ok);
    if (t.ok && t.output_tokens == 0) t.output_tokens = events;  // servers without usage
    return t;
  }

  absl::StatusOr<int> CountTokens(const std::string& text) override {
    Json request = {{"prompt", text}};
    if (!options_.model.empty()) request["model"] = options_.model;
    auto response = PostJson(endpoint_, "/tokenize", request.dump(), options_.api_key,
                             options_.timeout);
    if (!response.ok()) return response.status();
    const Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (response->status != 200 || !body.is_object() || !body.contains("count") ||
        !body["count"].is_number_integer()) {
      return absl::UnimplementedError(
          absl::StrCat("no usable /tokenize (HTTP ", response->status, ")"));
    }
    return body["count"].get<int>();
  }

 private:
  const TargetOptions options_;
  const HttpEndpoint endpoint_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BenchTarget>> MakeOpenAiTarget(const TargetOptions& options) {
  absl::StatusOr<HttpEndpoint> endpoint = HttpEndpoint::Parse(options.url);
  if (!endpoint.ok()) return endpoint.status();
  return std::make_unique<OpenAiTarget>(options, *std::move(endpoint));
}

}  // namespace xserv::tools
