// A small blocking HTTP/1.1 client for the command-line tools that talk to an OpenAI-compatible
// server (xserv-perplexity; later xserv-bench and xserv-chat): one request per connection,
// JSON bodies, an optional bearer key. Plain http:// only.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::tools {

struct HttpEndpoint {
  std::string host;
  std::string port;
  std::string base_path;  // "" or e.g. "/v1-proxy" (no trailing slash)

  // "http://host:port[/path]"; InvalidArgument otherwise.
  static absl::StatusOr<HttpEndpoint> Parse(const std::string& url);
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// POSTs `json_body` to endpoint.base_path + `path`. Transport failures (refused, reset, timeout)
// are Unavailable / DeadlineExceeded; any HTTP status is a response.
absl::StatusOr<HttpResponse> PostJson(const HttpEndpoint& endpoint, const std::string& path,
                                      const std::string& json_body, const std::string& api_key,
                                      std::chrono::seconds timeout);

// Like PostJson, but hands the response body to `on_body(status, bytes)` piece by piece as it
// arrives (SSE streams); `on_body` returns false to stop reading. `timeout` bounds each silence,
// not the whole stream. Returns the status and an empty body.
absl::StatusOr<HttpResponse> PostJsonStreaming(
    const HttpEndpoint& endpoint, const std::string& path, const std::string& json_body,
    const std::string& api_key, std::chrono::seconds timeout,
    const std::function<bool(int status, std::string_view bytes)>& on_body);

// Splits an SSE byte stream into the payloads of its "data: " lines, across arbitrary chunk
// boundaries.
class SseReader {
 public:
  // Appends bytes; returns the complete data payloads they finish, in order.
  std::vector<std::string> Feed(std::string_view bytes);

 private:
  std::string pending_;
};

}  // namespace xserv::tools
