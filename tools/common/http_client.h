// A small blocking HTTP/1.1 client for the command-line tools that talk to an OpenAI-compatible
// server (xserv-perplexity; later xserv-bench and xserv-chat): one request per connection,
// JSON bodies, an optional bearer key. Plain http:// only.
#pragma once

#include <chrono>
#include <string>

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

}  // namespace xserv::tools
