#include "router/http/http_responder.h"

#include <cstdio>
#include <ctime>
#include <exception>
#include <string>
#include <utility>

#include <boost/beast/http/status.hpp>

#include "router/http/connection.h"
#include "spdlog/spdlog.h"

namespace xserv::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {

// ": ping" SSE comment, framed as one chunk (HTTP/1.1) or raw (HTTP/1.0, close-delimited).
constexpr std::string_view kChunkedPing = "8\r\n: ping\n\n\r\n";
constexpr std::string_view kRawPing = ": ping\n\n";
constexpr std::string_view kLastChunk = "0\r\n\r\n";
constexpr std::string_view kCrLf = "\r\n";

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsValidHeader(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!IsTokenChar(c)) return false;
  }
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

bool IsManagedHeader(std::string_view name) {
  return EqualsIgnoreCase(name, "Content-Length") || EqualsIgnoreCase(name, "Transfer-Encoding") ||
         EqualsIgnoreCase(name, "Connection");
}

bool AsksToClose(const HttpHeaders& headers) {
  for (const auto& [name, value] : headers) {
    if (EqualsIgnoreCase(name, "Connection") && EqualsIgnoreCase(value, "close")) return true;
  }
  return false;
}

std::string_view ReasonPhrase(int status) {
  boost::beast::string_view reason = bhttp::obsolete_reason(bhttp::int_to_status(status));
  if (bhttp::int_to_status(status) == bhttp::status::unknown) return "Unknown";
  return std::string_view(reason.data(), reason.size());
}

// IMF-fixdate of the current second ("Sun, 06 Nov 1994 08:49:37 GMT"), cached per thread.
std::string_view HttpDate() {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  thread_local std::time_t cached_second = -1;
  thread_local char text[40];
  thread_local int length = 0;
  std::time_t now = std::time(nullptr);
  if (now != cached_second) {
    std::tm t{};
    gmtime_r(&now, &t);
    length = std::snprintf(text, sizeof(text), "%s, %02d %s %04d %02d:%02d:%02d GMT",
                           kDays[t.tm_wday % 7], t.tm_mday, kMonths[t.tm_mon % 12],
                           t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
    cached_second = now;
  }
  return std::string_view(text, static_cast<size_t>(length));
}

void InvokeGuarded(const std::function<void()>& callback) {
  try {
    callback();
  } catch (const std::exception& e) {
    spdlog::error("http: OnClientGone callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("http: OnClientGone callback threw a non-exception");
  }
}

}  // namespace

namespace internal {

std::string FormatResponseHead(int status, std::string_view content_type, std::string_view framing,
                               const HttpHeaders& extra, bool keep_alive, int request_version) {
  std::string head;
  head.reserve(256);
  head += "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  head += ReasonPhrase(status);
  head += "\r\nServer: xserv\r\nDate: ";
  head += HttpDate();
  head += kCrLf;
  if (!content_type.empty() && IsValidHeader("Content-Type", content_type)) {
    head += "Content-Type: ";
    head += content_type;
    head += kCrLf;
  }
  head += framing;
  for (const auto& [name, value] : extra) {
    if (IsManagedHeader(name)) continue;
    if (!IsValidHeader(name, value)) {
      spdlog::warn("http: dropping invalid response header '{}'", name);
      continue;
    }
    head += name;
    head += ": ";
    head += value;
    head += kCrLf;
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else if (request_version == 10) {
    head += "Connection: keep-alive\r\n";
  }
  head += kCrLf;
  return head;
}

}  // namespace internal

HttpResponder::HttpResponder(internal::Connection* connection, const HttpRequest& request)
    : connection_(connection), request_(request) {}

asio::any_io_executor HttpResponder::executor() const { return connection_->executor(); }

void HttpResponder::CloseConnectionAfterResponse() { connection_->CloseAfterResponse(); }

bool HttpResponder::client_gone() const { return connection_->client_gone(); }

void HttpResponder::OnClientGone(std::function<void()> callback) {
  if (!callback) return;
  if (connection_->client_gone()) {
    InvokeGuarded(callback);
    return;
  }
  gone_callbacks_.push_back(std::move(callback));
}

void HttpResponder::FireClientGone() {
  std::vector<std::function<void()>> callbacks = std::move(gone_callbacks_);
  gone_callbacks_.clear();
  for (const auto& callback : callbacks) InvokeGuarded(callback);
}

std::string HttpResponder::FormatHead(int status, std::string_view content_type,
                                      const HttpHeaders& extra, std::string_view framing) {
  HttpHeaders headers = std::move(pending_headers_);
  pending_headers_.clear();
  for (const auto& header : extra) headers.push_back(header);
  if (AsksToClose(headers)) connection_->CloseAfterResponse();
  keep_alive_ = request_.keep_alive && connection_->keep_alive_allowed();
  connection_->shared().ReportStatus(status);
  return internal::FormatResponseHead(status, content_type, framing, headers, keep_alive_,
                                      request_.version);
}

asio::awaitable<bool> HttpResponder::Send(int status, std::string content_type, std::string body,
                                          HttpHeaders extra_headers) {
  if (state_ != State::kNone) {
    spdlog::error("http: second response for {} {} refused", request_.method, request_.path());
    co_return false;
  }
  state_ = State::kSent;
  if (status < 200 || status > 999) {
    spdlog::error("http: handler status {} for {} {} replaced by 500", status, request_.method,
                  request_.path());
    status = 500;
  }
  const bool no_body = status == 204 || status == 304;
  std::string framing;
  if (!no_body) framing = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  std::string head = FormatHead(status, content_type, extra_headers, framing);
  asio::const_buffer body_buffer;
  if (!no_body && request_.method != "HEAD") body_buffer = asio::buffer(body);
  co_return co_await connection_->Write(asio::buffer(head), body_buffer);
}

asio::awaitable<bool> HttpResponder::StartSse(HttpHeaders extra_headers) {
  if (state_ != State::kNone) {
    spdlog::error("http: StartSse after a response for {} {} refused", request_.method,
                  request_.path());
    co_return false;
  }
  state_ = State::kSseStreaming;
  chunked_ = request_.version >= 11;
  if (!chunked_) connection_->CloseAfterResponse();  // the end of the body is the close
  HttpHeaders headers;
  headers.reserve(2 + extra_headers.size());
  headers.emplace_back("Cache-Control", "no-cache");
  headers.emplace_back("X-Accel-Buffering", "no");
  for (auto& header : extra_headers) headers.push_back(std::move(header));
  std::string head = FormatHead(200, "text/event-stream", headers,
                                chunked_ ? "Transfer-Encoding: chunked\r\n" : "");
  bool ok = co_await connection_->Write(asio::buffer(head));
  if (ok && state_ == State::kSseStreaming) {
    connection_->SetSsePing(chunked_ ? kChunkedPing : kRawPing);
  }
  co_return ok;
}

asio::awaitable<bool> HttpResponder::SendSse(std::string_view data, std::string_view event) {
  if (state_ != State::kSseStreaming) {
    if (state_ == State::kNone) {
      spdlog::error("http: SendSse before StartSse for {} {}", request_.method, request_.path());
    }
    co_return false;
  }
  std::string payload;
  payload.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    payload += "event: ";
    payload += event.substr(0, event.find_first_of("\r\n"));
    payload += '\n';
  }
  // One "data:" line per line of data (CR, LF and CRLF all end a line in SSE).
  size_t start = 0;
  for (;;) {
    size_t end = data.find_first_of("\r\n", start);
    payload += "data: ";
    payload += data.substr(start, end == std::string_view::npos ? end : end - start);
    payload += '\n';
    if (end == std::string_view::npos) break;
    if (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n') ++end;
    start = end + 1;
  }
  payload += '\n';
  if (!chunked_) co_return co_await connection_->Write(asio::buffer(payload));
  char size_line[24];
  int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", payload.size());
  co_return co_await connection_->Write(asio::buffer(size_line, static_cast<size_t>(n)),
                                        asio::buffer(payload),
                                        asio::buffer(kCrLf.data(), kCrLf.size()));
}

asio::awaitable<void> HttpResponder::EndSse() {
  if (state_ != State::kSseStreaming) co_return;
  state_ = State::kSseEnded;
  connection_->SetSsePing({});
  if (chunked_) co_await connection_->Write(asio::buffer(kLastChunk.data(), kLastChunk.size()));
}

asio::awaitable<void> HttpResponder::Finish(bool handler_threw) {
  gone_callbacks_.clear();  // they may capture the handler's locals, which are gone now
  switch (state_) {
    case State::kNone: {
      if (!handler_threw) {
        spdlog::error("http: handler for {} {} returned without a response", request_.method,
                      request_.path());
      }
      HttpErrorBody error = connection_->shared().ErrorBody(
          500, handler_threw ? "internal error" : "handler sent no response");
      co_await Send(500, std::move(error.content_type), std::move(error.body));
      break;
    }
    case State::kSseStreaming:
      if (handler_threw) {
        state_ = State::kAborted;
        connection_->SetSsePing({});
        connection_->AbortResponse();
      } else {
        co_await EndSse();
      }
      break;
    case State::kSent:
    case State::kSseEnded:
    case State::kAborted:
      break;
  }
}

}  // namespace xserv::http
