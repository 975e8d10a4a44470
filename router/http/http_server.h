// HttpServer: HTTP/1.1 server on Boost.Beast/Asio with C++20 coroutines, built to hold thousands of
// concurrent SSE streams on a few threads and to survive hostile clients. It knows nothing about
// OpenAI: it parses requests, enforces limits and timeouts, and hands each request to one
// HttpHandler coroutine (see http_responder.h for how to answer, async_queue.h for feeding a
// handler from other threads).
//
// Ownership and threading: Start() returns the only owner. Start(), port(), num_connections(),
// Stop() and the destructor may be called from any thread EXCEPT the server's own I/O threads
// (Stop() joins them; calling it from one aborts). The server runs one io_context on
// options.threads threads. Each connection is one coroutine on its own strand; the handler runs on
// that strand (HttpResponder::executor()), so a handler never runs concurrently with itself for the
// same connection, while different connections run in parallel.
//
// Behaviour: keep-alive and Connection: close; request bodies by Content-Length or chunked,
// Expect: 100-continue answered; malformed requests get 400, heads over max_header_bytes 431,
// bodies over max_body_bytes 413, requests not complete within read_timeout 408, connections
// beyond max_connections 503, each followed by a close. Methods are not checked (handlers answer
// 404/405). Pipelined requests are served one after another. A handler that throws is logged and
// answered with 500 (if nothing was sent yet).
//
// Example: plain responses, and an SSE stream fed from other threads (e.g. a gRPC reactor).
//   namespace asio = boost::asio;
//   HttpHandler handler = [](const HttpRequest& req, HttpResponder& res) -> asio::awaitable<void> {
//     if (req.path() == "/health") {
//       co_await res.Send(200, "application/json", R"({"status":"ok"})");
//       co_return;
//     }
//     if (req.method != "POST") {
//       res.AddHeader("Allow", "POST");
//       co_await res.Send(405, "application/json", R"({"error":{"message":"use POST"}})");
//       co_return;
//     }
//     auto deltas = std::make_shared<AsyncQueue<std::string>>(res.executor());
//     // The producer keeps a weak_ptr: Push() per delta from any thread, Close() at the end.
//     auto call = StartUpstream(req.body, std::weak_ptr<AsyncQueue<std::string>>(deltas));
//     res.OnClientGone([call] { call->Cancel(); });  // e.g. grpc::ClientContext::TryCancel()
//     if (!co_await res.StartSse()) co_return;
//     for (auto batch = co_await deltas->PopAll(); !batch.empty();
//          batch = co_await deltas->PopAll()) {
//       for (const std::string& json : batch) {
//         if (!co_await res.SendSse(json)) co_return;  // client gone; upstream already cancelled
//       }
//     }
//     co_await res.SendSse("[DONE]");
//     co_await res.EndSse();
//   };
//   auto server = HttpServer::Start({.host = "0.0.0.0", .port = 8000, .threads = 2}, handler);
//   if (!server.ok()) return server.status();
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "router/http/asio_includes.h"
#include "router/http/http_options.h"
#include "router/http/http_request.h"
#include "router/http/http_responder.h"

namespace xserv::http {

namespace internal {
struct ServerShared;
}  // namespace internal

class HttpServer {
 public:
  // Validates the options, binds and listens (errors: InvalidArgument for bad options or host,
  // Unavailable when the address cannot be bound), then starts the I/O threads.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HttpHandler handler);
  ~HttpServer();  // Stop()

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }

  // Open connections (not counting ones being refused with 503).
  size_t num_connections() const;

  // Graceful stop; idempotent. Stops accepting, closes idle keep-alive connections at once, lets
  // in-flight responses run up to options.stop_grace (they are told to close afterwards), then
  // closes what is left (handlers see client_gone()) and joins the I/O threads.
  void Stop();

 private:
  explicit HttpServer(std::shared_ptr<internal::ServerShared> shared);
  absl::Status Listen();
  boost::asio::awaitable<void> AcceptLoop();
  bool WaitForConnections(std::chrono::steady_clock::duration timeout) const;

  std::shared_ptr<internal::ServerShared> shared_;
  boost::asio::io_context io_context_;                // destroyed last
  boost::asio::ip::tcp::acceptor acceptor_;           // on its own strand
  std::vector<std::thread> threads_;
  int port_ = 0;
  uint64_t next_connection_id_ = 1;                   // accept loop only
  std::mutex stop_mu_;
  bool stopped_ = false;                              // guarded by stop_mu_
};

}  // namespace xserv::http
