// HttpRequest: one fully read HTTP/1.1 request as handed to an HttpHandler (plain data, no Beast).
//
// Ownership: the server owns the request; the handler gets a const reference that is valid until
// the handler coroutine returns. Copy what must live longer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xserv::http {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", or any other token; the handler decides 405)
  std::string target;  // origin-form target as sent: path plus optional "?query"
  int version = 11;    // 11 for HTTP/1.1, 10 for HTTP/1.0
  HttpHeaders headers;  // in arrival order, names as sent
  std::string body;     // de-chunked; at most HttpServerOptions::max_body_bytes
  std::string remote_address;  // "ip:port" of the peer
  bool keep_alive = true;      // what the client asked for (Connection header and version)

  // The target up to '?', and what follows it (empty when there is no query).
  std::string_view path() const;
  std::string_view query() const;

  // First header with this name, compared ASCII case-insensitively.
  std::optional<std::string_view> Header(std::string_view name) const;
};

// A path segment with its %XX escapes decoded ("Qwen%2FQwen3-8B" -> "Qwen/Qwen3-8B"); nullopt
// when an escape is malformed or decodes to NUL.
std::optional<std::string> PercentDecode(std::string_view text);

// ASCII case-insensitive equality, for header names and tokens.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace xserv::http
