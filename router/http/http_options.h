// HttpServerOptions: everything the HTTP server is configured with, fixed at HttpServer::Start().
//
// Plain data built with designated initialisers; Validate() is called by Start(). The callbacks
// (on_response, error_body) are invoked concurrently from the server's I/O threads and must be
// thread-safe, cheap and non-blocking.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace xserv::http {

// Body of a response the server generates itself (400, 408, 413, 431, 500, 503).
struct HttpErrorBody {
  std::string content_type;
  std::string body;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // numeric address or a name resolved at start-up
  int port = 8080;                 // 0 picks a free port; see HttpServer::port()
  int threads = 2;                 // threads running the io_context

  size_t max_body_bytes = size_t{8} << 20;     // larger request bodies get 413
  size_t max_header_bytes = size_t{16} << 10;  // larger request heads get 431
  size_t max_connections = 10000;              // open connections beyond this get 503 + close

  // A request must arrive completely (head and body) within read_timeout of its first byte,
  // otherwise 408 and close (slowloris). A kept-alive connection may wait idle_timeout for the
  // first byte of its next request, then it is closed silently. A single write that makes no
  // progress for write_timeout (a client that stopped reading) closes the connection.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};

  // An SSE stream that wrote nothing for this long gets a ": ping" comment (0 disables). Keeps
  // proxies and load balancers from closing quiet streams (e.g. during a long prefill).
  std::chrono::milliseconds sse_ping_interval{std::chrono::seconds(15)};

  // Stop(): how long in-flight responses (including SSE streams) may run before being cut.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};

  int listen_backlog = 4096;

  // Observer for every response status the server writes (handler responses, SSE streams as 200
  // and server-generated errors); e.g. for an http_requests_total{status} counter. Optional.
  std::function<void(int status)> on_response{};

  // Formats server-generated error bodies; default: text/plain with the message. The OpenAI layer
  // plugs its {"error":{...}} shape in here.
  std::function<HttpErrorBody(int status, std::string_view message)> error_body{};

  absl::Status Validate() const;
};

}  // namespace xserv::http
