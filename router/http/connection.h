// Internal to router/http: one accepted TCP connection and the state the server shares with all of
// its connections. Not part of the public API (include http_server.h instead).
//
// Ownership and threading: a Connection is owned by shared_ptrs held by its own coroutines (the
// request loop and the watchdog) and by pending I/O callbacks; it dies when the last of them ends.
// Everything except Shutdown() and ForceClose() runs on the connection's strand (the socket's
// executor); those two post to it and may be called from any thread.
//
// Per connection there is one request loop coroutine (read a request, run the handler, repeat),
// one watchdog coroutine enforcing read/write deadlines and sending SSE pings, and, while a handler
// runs, one pending read (the "watcher") that notices the peer closing. Writes go through a gate so
// that the handler and the pinger never write at the same time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/flat_buffer.hpp>

#include "absl/container/flat_hash_map.h"
#include "router/http/asio_includes.h"
#include "router/http/http_options.h"
#include "router/http/http_request.h"
#include "router/http/http_responder.h"

namespace xserv::http {

namespace internal {

class Connection;

// Open connections by id; the count enforces max_connections. Thread-safe.
class ConnectionRegistry {
 public:
  void Add(uint64_t id, std::weak_ptr<Connection> connection);
  void Remove(uint64_t id);
  size_t size() const;
  std::vector<std::shared_ptr<Connection>> Snapshot() const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, std::weak_ptr<Connection>> connections_;  // guarded by mu_
};

// Shared by the server and its connections; outlives both (connections hold a shared_ptr).
struct ServerShared {
  HttpServerOptions options;
  HttpHandler handler;
  std::atomic<bool> stopping{false};
  ConnectionRegistry registry;

  HttpErrorBody ErrorBody(int status, std::string_view message) const;
  void ReportStatus(int status) const {
    if (options.on_response) options.on_response(status);
  }
};

// The head of a response: status line, Server, Content-Type (if non-empty), `framing`
// (Content-Length or Transfer-Encoding lines), the valid extra headers, Connection, blank line.
// Extra headers the server manages (Content-Length, Transfer-Encoding, Connection) or with invalid
// names/values are dropped. Implemented in http_responder.cc.
std::string FormatResponseHead(int status, std::string_view content_type, std::string_view framing,
                               const HttpHeaders& extra, bool keep_alive, int request_version);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using Clock = std::chrono::steady_clock;

  // `socket` must have its own strand as executor. `registered`: counted in the registry (false
  // for connections refused with 503).
  Connection(Socket socket, std::shared_ptr<ServerShared> shared, uint64_t id, bool registered);
  ~Connection();

  // Starts the request loop, or (reject) writes 503 and closes.
  void Start(bool reject);

  // Any thread. Shutdown: close now if idle, else after the current response. ForceClose: close
  // the socket now; a running handler sees client_gone().
  void Shutdown();
  void ForceClose();

  // ---- Used by HttpResponder, on the strand only. ----
  // Writes the buffers in order (memory kept alive by the caller until completion); false on
  // failure or timeout. Fixed arity rather than a vector: no allocation, and no braced lists in
  // co_await expressions, which GCC 12 cannot compile ("array used as initializer").
  boost::asio::awaitable<bool> Write(boost::asio::const_buffer first,
                                     boost::asio::const_buffer second = {},
                                     boost::asio::const_buffer third = {});
  // Enables SSE keep-alive pings with these exact bytes (already framed, static storage), or
  // disables them (empty).
  void SetSsePing(std::string_view ping_bytes);
  // Makes the connection close after the current response.
  void CloseAfterResponse() { close_after_response_ = true; }
  bool client_gone() const { return client_gone_; }
  bool keep_alive_allowed() const;
  // Ends an SSE stream abnormally: closes the socket so the client sees a truncated response.
  void AbortResponse();
  boost::asio::any_io_executor executor() const { return executor_; }
  const ServerShared& shared() const { return *shared_; }

 private:
  enum class Phase { kIdle, kReadingRequest, kHandling, kClosing };

  boost::asio::awaitable<void> Run(std::shared_ptr<Connection> self);
  boost::asio::awaitable<void> RunRejected(std::shared_ptr<Connection> self);
  boost::asio::awaitable<void> Watchdog(std::shared_ptr<Connection> self);

  // Outcome of reading a request: status 0 = ok; > 0 = answer with it and close; -1 = close.
  struct ReadResult {
    int status = 0;
    std::string_view message;  // static storage
  };
  boost::asio::awaitable<ReadResult> ReadRequest(HttpRequest& request);
  ReadResult MapReadError(const boost::system::error_code& ec) const;
  // Runs the handler through the one exception adapter; returns whether to keep the connection.
  boost::asio::awaitable<bool> Handle(const HttpRequest& request);
  boost::asio::awaitable<void> SendErrorAndClose(int status, std::string_view message);
  boost::asio::awaitable<void> Close(bool linger);

  void StartWatcher();
  boost::asio::awaitable<void> StopWatcher();
  void MarkClientGone(std::string_view why);

  boost::asio::awaitable<void> AcquireWriteGate();
  void ReleaseWriteGate();
  void FinishWrite(const boost::system::error_code& ec);
  void MaybePing();

  void SetDeadline(Clock::time_point& deadline, Clock::duration timeout);
  void CloseSocket();

  Socket socket_;
  boost::asio::any_io_executor executor_;  // the strand
  std::shared_ptr<ServerShared> shared_;
  const uint64_t id_;
  const bool registered_;
  std::string remote_address_;
  boost::beast::flat_buffer buffer_;

  Phase phase_ = Phase::kIdle;
  bool shutdown_requested_ = false;
  bool close_after_response_ = false;
  bool closed_ = false;            // the request loop ended; the watchdog exits
  bool read_timed_out_ = false;
  bool client_gone_ = false;
  bool write_failed_ = false;
  bool peer_closed_ = false;
  HttpResponder* responder_ = nullptr;  // while a handler runs

  // Watchdog: one timer, woken early when a sooner deadline is set. time_point::max() = unset.
  boost::asio::steady_timer watchdog_timer_;
  Clock::time_point read_deadline_ = Clock::time_point::max();
  Clock::time_point write_deadline_ = Clock::time_point::max();
  Clock::time_point ping_deadline_ = Clock::time_point::max();
  std::string_view ping_bytes_;  // static storage; non-empty while an SSE stream wants pings

  // Write gate: one write at a time. Waiters sleep on gate_timer_ (never expires; cancel = wake).
  bool write_in_flight_ = false;
  int gate_waiters_ = 0;
  boost::asio::steady_timer gate_timer_;

  // Watcher read while the handler runs; StopWatcher sleeps on watcher_timer_ until it ended.
  bool watcher_active_ = false;
  boost::asio::steady_timer watcher_timer_;
};

}  // namespace internal
}  // namespace xserv::http
