// HttpResponder: how a handler answers one request, either with one whole response (Send) or with
// a server-sent-event stream (StartSse, SendSse..., EndSse).
//
// Ownership and threading: the server creates one responder per request and owns it; the handler
// gets a reference valid until the handler coroutine returns (never keep it beyond that, e.g. in a
// detached coroutine or a gRPC reactor). Every method must be called on executor(), the
// connection's strand, which is where the handler coroutine runs; coroutines resume there after
// any co_await. Writes of one connection are sequential (the server orders them, including its own
// SSE keep-alive pings); different connections never wait for each other.
//
// GCC 12 cannot compile a braced list inside a co_await expression ("array used as initializer"),
// e.g. `co_await res.Send(200, "text/plain", "x", {{"A", "b"}})`. Use AddHeader(), or build the
// HttpHeaders in a local variable first.
//
// Errors are not thrown: the awaitables return false when the client is gone (a write failed or
// timed out). A handler that throws gets a 500 if it had not started a response; an exception in
// the middle of an SSE stream aborts the connection (the client sees a truncated stream).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "router/http/asio_includes.h"
#include "router/http/http_request.h"

namespace xserv::http {

namespace internal {
class Connection;
}  // namespace internal

class HttpResponder {
 public:
  HttpResponder(const HttpResponder&) = delete;
  HttpResponder& operator=(const HttpResponder&) = delete;

  // Adds a header to the response head written next by Send or StartSse (before extra_headers).
  void AddHeader(std::string name, std::string value) {
    pending_headers_.emplace_back(std::move(name), std::move(value));
  }

  // One complete response with Content-Length. Returns false when it could not be written.
  // Content-Length, Transfer-Encoding and Connection in extra_headers are managed by the server
  // ("Connection: close" is honoured: the connection closes after this response). Header names or
  // values with CR, LF or NUL are dropped. A second response for the same request is refused.
  boost::asio::awaitable<bool> Send(int status, std::string content_type, std::string body,
                                    HttpHeaders extra_headers = {});

  // Starts a server-sent-event stream: 200, text/event-stream, Cache-Control: no-cache, chunked
  // transfer encoding (HTTP/1.0 clients get a close-delimited body). False if the client is gone.
  boost::asio::awaitable<bool> StartSse(HttpHeaders extra_headers = {});

  // One event: optional "event: <event>" line, then one "data: " line per line of `data`, then a
  // blank line; one chunk, one write. False if the client is gone (stop producing then).
  boost::asio::awaitable<bool> SendSse(std::string_view data, std::string_view event = {});

  // Ends the stream (terminal chunk). Done automatically if the handler returns without it.
  boost::asio::awaitable<void> EndSse();

  // True once the client is known to be gone: a write failed or timed out, or the peer closed its
  // side of the connection while the handler ran. The client may still read a response after a
  // half-close, so writes are attempted anyway.
  bool client_gone() const;

  // Runs `callback` once, on executor(), when the client goes away during this request (right away
  // if it already has). Use it to cancel upstream work (e.g. ClientContext::TryCancel, or
  // AsyncQueue::Close to wake the handler). Must not block; exceptions are logged and swallowed.
  void OnClientGone(std::function<void()> callback);

  // Closes the connection after this response instead of keeping it alive (e.g. after an error
  // event ended a stream). Same as a "Connection: close" header when called before the head.
  void CloseConnectionAfterResponse();

  // True once Send or StartSse has been called.
  bool response_started() const { return state_ != State::kNone; }

  // The connection's strand: the handler's executor. Use it for timers and AsyncQueue.
  boost::asio::any_io_executor executor() const;

 private:
  friend class internal::Connection;

  enum class State { kNone, kSent, kSseStreaming, kSseEnded, kAborted };

  HttpResponder(internal::Connection* connection, const HttpRequest& request);

  // Connection side (strand): fire OnClientGone callbacks; finish after the handler returned.
  void FireClientGone();
  boost::asio::awaitable<void> Finish(bool handler_threw);
  bool keep_alive() const { return keep_alive_; }

  // "HTTP/1.1 <status> <reason>" plus standard and extra headers plus the blank line.
  std::string FormatHead(int status, std::string_view content_type, const HttpHeaders& extra,
                         std::string_view framing_headers);

  internal::Connection* connection_;
  const HttpRequest& request_;
  State state_ = State::kNone;
  bool chunked_ = false;     // SSE framing: HTTP/1.1 chunks, else close-delimited
  bool keep_alive_ = false;  // decided when the response head is written
  std::vector<std::function<void()>> gone_callbacks_;
  HttpHeaders pending_headers_;  // from AddHeader
};

// A request handler: a coroutine run on the connection's strand, once per request. It must answer
// through the responder (Send, or StartSse...) before returning; if it does not, the server sends
// 500. It must be safe to call concurrently for different connections.
using HttpHandler =
    std::function<boost::asio::awaitable<void>(const HttpRequest&, HttpResponder&)>;

}  // namespace xserv::http
