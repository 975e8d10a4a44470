#include "router/http/connection.h"

#include <algorithm>
#include <array>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <exception>
#include <limits>
#include <utility>

#include "spdlog/spdlog.h"

namespace xserv::http::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kFirstReadBytes = 16 * 1024;
constexpr size_t kWatchReadBytes = 4 * 1024;
constexpr size_t kBufferSlackBytes = 128 * 1024;
constexpr std::chrono::milliseconds kLingerTime(500);
constexpr size_t kLingerMaxBytes = 1 << 20;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

std::string_view ToStd(beast::string_view s) { return std::string_view(s.data(), s.size()); }

std::string FormatRemote(const asio::ip::tcp::socket& socket) {
  error_code ec;
  asio::ip::tcp::endpoint ep = socket.remote_endpoint(ec);
  if (ec) return "?";
  if (ep.address().is_v6())
    return "[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

// Completion handler for co_spawn: the coroutines catch what they expect, this logs the rest.
auto LogIfThrew(const char* what) {
  return [what](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("http: {} ended with an exception: {}", what, ex.what());
    } catch (...) {
      spdlog::error("http: {} ended with an unknown exception", what);
    }
  };
}

}  // namespace

// ---- ConnectionRegistry / ServerShared ----

void ConnectionRegistry::Add(uint64_t id, std::weak_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.emplace(id, std::move(connection));
}

void ConnectionRegistry::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(id);
}

size_t ConnectionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_.size();
}

std::vector<std::shared_ptr<Connection>> ConnectionRegistry::Snapshot() const {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(connections_.size());
  for (const auto& [id, weak] : connections_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

HttpErrorBody ServerShared::ErrorBody(int status, std::string_view message) const {
  if (options.error_body) {
    try {
      return options.error_body(status, message);
    } catch (const std::exception& e) {
      spdlog::error("http: error_body formatter threw: {}", e.what());
    }
  }
  return HttpErrorBody{"text/plain; charset=utf-8", std::string(message) + "\n"};
}

// ---- Connection: life cycle ----

Connection::Connection(Socket socket, std::shared_ptr<ServerShared> shared, uint64_t id,
                       bool registered)
    : socket_(std::move(socket)),
      executor_(socket_.get_executor()),
      shared_(std::move(shared)),
      id_(id),
      registered_(registered),
      remote_address_(FormatRemote(socket_)),
      buffer_(shared_->options.max_header_bytes + kBufferSlackBytes),
      watchdog_timer_(executor_, Clock::time_point::max()),
      gate_timer_(executor_, Clock::time_point::max()),
      watcher_timer_(executor_, Clock::time_point::max()) {}

Connection::~Connection() {
  if (registered_) shared_->registry.Remove(id_);
}

void Connection::Start(bool reject) {
  std::shared_ptr<Connection> self = shared_from_this();
  asio::co_spawn(executor_, Watchdog(self), LogIfThrew("connection watchdog"));
  if (reject) {
    asio::co_spawn(executor_, RunRejected(self), LogIfThrew("connection"));
  } else {
    asio::co_spawn(executor_, Run(self), LogIfThrew("connection"));
  }
}

void Connection::Shutdown() {
  asio::post(executor_, [self = shared_from_this()] {
    self->shutdown_requested_ = true;
    if (self->phase_ == Phase::kIdle) {
      error_code ec;
      self->socket_.cancel(ec);  // ends the wait for the next request
    }
  });
}

void Connection::ForceClose() {
  asio::post(executor_, [self = shared_from_this()] {
    self->shutdown_requested_ = true;
    self->MarkClientGone("server stopping");
    self->CloseSocket();
  });
}

void Connection::AbortResponse() {
  close_after_response_ = true;
  CloseSocket();
}

void Connection::CloseSocket() {
  error_code ec;
  socket_.close(ec);
}

bool Connection::keep_alive_allowed() const {
  return !close_after_response_ && !shutdown_requested_ && !shared_->stopping.load() &&
         !peer_closed_ && !write_failed_ && socket_.is_open();
}

asio::awaitable<void> Connection::Run(std::shared_ptr<Connection> self) {
  const HttpServerOptions& options = shared_->options;
  bool linger = false;
  try {
    for (;;) {
      phase_ = Phase::kIdle;
      if (shutdown_requested_ || shared_->stopping.load()) break;
      if (buffer_.size() == 0) {
        // Keep-alive wait for the first byte of the next request.
        SetDeadline(read_deadline_, options.idle_timeout);
        error_code ec;
        size_t n = co_await socket_.async_read_some(buffer_.prepare(kFirstReadBytes), Redirect(ec));
        read_deadline_ = Clock::time_point::max();
        if (ec) break;  // peer closed, idle timeout or shutdown: close silently
        buffer_.commit(n);
      }
      phase_ = Phase::kReadingRequest;
      HttpRequest request;
      ReadResult read = co_await ReadRequest(request);
      if (read.status != 0) {
        if (read.status > 0) {
          co_await SendErrorAndClose(read.status, read.message);
          linger = true;
        }
        break;
      }
      phase_ = Phase::kHandling;
      if (!co_await Handle(request)) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("http: connection {} ({}) failed: {}", id_, remote_address_, e.what());
  }
  phase_ = Phase::kClosing;
  co_await Close(linger || buffer_.size() > 0);
  closed_ = true;
  watchdog_timer_.cancel();
}

asio::awaitable<void> Connection::RunRejected(std::shared_ptr<Connection> self) {
  spdlog::warn("http: refusing connection from {}: {} connections open", remote_address_,
               shared_->registry.size());
  co_await SendErrorAndClose(503, "too many connections");
  co_await Close(/*linger=*/true);
  closed_ = true;
  watchdog_timer_.cancel();
}

asio::awaitable<void> Connection::Close(bool linger) {
  if (!socket_.is_open()) co_return;
  error_code ec;
  socket_.shutdown(Socket::shutdown_send, ec);
  if (linger && !ec) {
    // Drain what the client is still sending, so that closing with unread input does not reset
    // the connection before the client has read our last response.
    SetDeadline(read_deadline_,
                std::min<Clock::duration>(kLingerTime, shared_->options.read_timeout));
    std::array<char, 4096> sink;
    size_t total = 0;
    while (total < kLingerMaxBytes) {
      size_t n = co_await socket_.async_read_some(asio::buffer(sink), Redirect(ec));
      if (ec) break;
      total += n;
    }
    read_deadline_ = Clock::time_point::max();
  }
  CloseSocket();
}

// ---- Reading ----

asio::awaitable<Connection::ReadResult> Connection::ReadRequest(HttpRequest& request) {
  const HttpServerOptions& options = shared_->options;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(options.max_body_bytes);

  read_timed_out_ = false;
  SetDeadline(read_deadline_, options.read_timeout);  // whole request, not per read (slowloris)
  error_code ec;
  co_await bhttp::async_read_header(socket_, buffer_, parser, Redirect(ec));
  // Beast 1.74 applies header_limit per parse window, so a head of many small fields that
  // arrives in one read can pass it: measure the whole head once it is parsed.
  if (!ec) {
    const auto& head = parser.get();
    size_t head_bytes = head.method_string().size() + head.target().size() + 12;
    for (const auto& field : head)
      head_bytes += field.name_string().size() + field.value().size() + 4;
    if (head_bytes > options.max_header_bytes) {
      read_deadline_ = Clock::time_point::max();
      co_return ReadResult{431, "request header fields too large"};
    }
  }
  if (!ec && !parser.is_done()) {
    if (EqualsIgnoreCase(ToStd(parser.get()[bhttp::field::expect]), "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!co_await Write(asio::buffer(kContinue.data(), kContinue.size()))) {
        read_deadline_ = Clock::time_point::max();
        co_return ReadResult{-1, {}};
      }
    }
    co_await bhttp::async_read(socket_, buffer_, parser, Redirect(ec));
  }
  read_deadline_ = Clock::time_point::max();
  if (ec) co_return MapReadError(ec);

  bhttp::request<bhttp::string_body> message = parser.release();
  request.method = std::string(ToStd(message.method_string()));
  request.target = std::string(ToStd(message.target()));
  request.version = message.version() >= 11 ? 11 : 10;
  request.headers.reserve(16);
  for (const auto& field : message) {
    request.headers.emplace_back(std::string(ToStd(field.name_string())),
                                 std::string(ToStd(field.value())));
  }
  request.keep_alive = message.keep_alive();
  request.body = std::move(message.body());
  request.remote_address = remote_address_;
  co_return ReadResult{};
}

Connection::ReadResult Connection::MapReadError(const error_code& ec) const {
  if (read_timed_out_) return {408, "request not received in time"};
  if (ec == bhttp::error::body_limit) return {413, "request body too large"};
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    return {431, "request header fields too large"};
  }
  if (ec == bhttp::error::end_of_stream) return {-1, {}};
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) {
    return {400, "malformed HTTP request"};
  }
  return {-1, {}};  // socket errors, shutdown
}

// ---- Handling ----

asio::awaitable<bool> Connection::Handle(const HttpRequest& request) {
  HttpResponder responder(this, request);
  responder_ = &responder;
  StartWatcher();
  bool threw = false;
  try {
    co_await shared_->handler(request, responder);
  } catch (const std::exception& e) {
    threw = true;
    spdlog::error("http: handler for {} {} from {} threw: {}", request.method, request.path(),
                  remote_address_, e.what());
  } catch (...) {
    threw = true;
    spdlog::error("http: handler for {} {} from {} threw a non-exception", request.method,
                  request.path(), remote_address_);
  }
  co_await responder.Finish(threw);
  // No write may be in flight when the watcher is cancelled (cancel() hits every operation).
  co_await AcquireWriteGate();
  ReleaseWriteGate();
  co_await StopWatcher();
  responder_ = nullptr;
  co_return responder.keep_alive() && request.keep_alive&& keep_alive_allowed();
}

asio::awaitable<void> Connection::SendErrorAndClose(int status, std::string_view message) {
  close_after_response_ = true;
  HttpErrorBody error = shared_->ErrorBody(status, message);
  std::string framing = "Content-Length: " + std::to_string(error.body.size()) + "\r\n";
  std::string head = FormatResponseHead(status, error.content_type, framing, {},
                                        /*keep_alive=*/false, /*request_version=*/11);
  shared_->ReportStatus(status);
  spdlog::debug("http: connection {} ({}): {} {}", id_, remote_address_, status, message);
  co_await Write(asio::buffer(head), asio::buffer(error.body));
}

void Connection::StartWatcher() {
  if (watcher_active_ || peer_closed_ || !socket_.is_open()) return;
  if (buffer_.size() + kWatchReadBytes > buffer_.max_size()) return;  // pipelined bytes pile up
  watcher_active_ = true;
  socket_.async_read_some(buffer_.prepare(kWatchReadBytes), [self = shared_from_this()](
                                                                const error_code& ec, size_t n) {
    self->watcher_active_ = false;
    self->watcher_timer_.cancel();
    if (!ec) {
      self->buffer_.commit(n);  // a pipelined request: parsed after this response
    } else if (ec != asio::error::operation_aborted) {
      self->peer_closed_ = true;
      self->MarkClientGone("peer closed the connection");
    }
  });
}

asio::awaitable<void> Connection::StopWatcher() {
  if (!watcher_active_) co_return;
  error_code ec;
  socket_.cancel(ec);
  while (watcher_active_) co_await watcher_timer_.async_wait(Redirect(ec));
}

void Connection::MarkClientGone(std::string_view why) {
  if (client_gone_) return;
  client_gone_ = true;
  spdlog::debug("http: connection {} ({}): client gone: {}", id_, remote_address_, why);
  if (responder_ != nullptr) responder_->FireClientGone();
}

// ---- Writing ----

asio::awaitable<void> Connection::AcquireWriteGate() {
  while (write_in_flight_) {
    ++gate_waiters_;
    error_code ec;
    co_await gate_timer_.async_wait(Redirect(ec));
    --gate_waiters_;
  }
  write_in_flight_ = true;
}

void Connection::ReleaseWriteGate() {
  write_in_flight_ = false;
  if (gate_waiters_ > 0) gate_timer_.cancel();
}

asio::awaitable<bool> Connection::Write(asio::const_buffer first, asio::const_buffer second,
                                        asio::const_buffer third) {
  const std::array<asio::const_buffer, 3> buffers{first, second, third};
  co_await AcquireWriteGate();
  if (write_failed_ || !socket_.is_open()) {
    ReleaseWriteGate();
    co_return false;
  }
  SetDeadline(write_deadline_, shared_->options.write_timeout);
  error_code ec;
  co_await asio::async_write(socket_, buffers, Redirect(ec));
  FinishWrite(ec);
  co_return !ec;
}

void Connection::FinishWrite(const error_code& ec) {
  write_deadline_ = Clock::time_point::max();
  if (ec) {
    write_failed_ = true;
    MarkClientGone(ec.message());
  } else if (!ping_bytes_.empty()) {
    SetDeadline(ping_deadline_, shared_->options.sse_ping_interval);
  }
  ReleaseWriteGate();
}

void Connection::SetSsePing(std::string_view ping_bytes) {
  if (shared_->options.sse_ping_interval.count() == 0) ping_bytes = {};
  ping_bytes_ = ping_bytes;
  if (ping_bytes_.empty()) {
    ping_deadline_ = Clock::time_point::max();
  } else {
    SetDeadline(ping_deadline_, shared_->options.sse_ping_interval);
  }
}

void Connection::MaybePing() {
  if (ping_bytes_.empty() || write_failed_ || !socket_.is_open()) return;
  if (write_in_flight_) {  // a write is under way anyway; look again later
    SetDeadline(ping_deadline_, shared_->options.sse_ping_interval);
    return;
  }
  write_in_flight_ = true;
  SetDeadline(write_deadline_, shared_->options.write_timeout);
  asio::async_write(
      socket_, asio::buffer(ping_bytes_.data(), ping_bytes_.size()),
      [self = shared_from_this()](const error_code& ec, size_t) { self->FinishWrite(ec); });
}

// ---- Watchdog ----

void Connection::SetDeadline(Clock::time_point& deadline, Clock::duration timeout) {
  deadline = Clock::now() + timeout;
  // Wake the watchdog only when this deadline is sooner than what it sleeps for; a later one is
  // picked up when it next wakes.
  if (deadline < watchdog_timer_.expiry()) watchdog_timer_.expires_at(deadline);
}

asio::awaitable<void> Connection::Watchdog(std::shared_ptr<Connection> self) {
  while (!closed_) {
    watchdog_timer_.expires_at(std::min({read_deadline_, write_deadline_, ping_deadline_}));
    error_code ec;
    co_await watchdog_timer_.async_wait(Redirect(ec));
    if (closed_) break;
    Clock::time_point now = Clock::now();
    if (write_deadline_ <= now) {
      write_deadline_ = Clock::time_point::max();
      MarkClientGone("write timed out");
      CloseSocket();
    }
    if (read_deadline_ <= now) {
      read_deadline_ = Clock::time_point::max();
      read_timed_out_ = true;
      socket_.cancel(ec);
    }
    if (ping_deadline_ <= now) {
      ping_deadline_ = Clock::time_point::max();
      MaybePing();
    }
  }
}

}  // namespace xserv::http::internal
