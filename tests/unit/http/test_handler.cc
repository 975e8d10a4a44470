#include "tests/unit/http/test_handler.h"

#include <charconv>
#include <memory>
#include <stdexcept>

#include "router/http/async_queue.h"

namespace xserv::http::testing {

namespace asio = boost::asio;

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int QueryInt(std::string_view query, std::string_view key, int fallback) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    std::string_view pair = query.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (pair.size() > key.size() && pair.substr(0, key.size()) == key && pair[key.size()] == '=') {
      int value = fallback;
      std::string_view text = pair.substr(key.size() + 1);
      std::from_chars(text.data(), text.data() + text.size(), value);
      return value;
    }
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return fallback;
}

asio::awaitable<void> SleepFor(std::chrono::milliseconds duration) {
  asio::steady_timer timer(co_await asio::this_coro::executor, duration);
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

namespace {

asio::awaitable<void> Sse(const HttpRequest& request, HttpResponder& responder, Probe* probe) {
  const int n = QueryInt(request.query(), "n", 10);
  const int delay_ms = QueryInt(request.query(), "delay_ms", 0);
  const int quiet_ms = QueryInt(request.query(), "quiet_ms", 0);
  const std::string pad(static_cast<size_t>(QueryInt(request.query(), "pad", 0)), 'p');
  responder.OnClientGone([probe] {
    probe->last_gone_at_us = NowMicros();
    ++probe->gone_fired;
  });
  HttpHeaders headers{{"X-Stream", "yes"}};  // a local: see the GCC 12 note in http_responder.h
  if (!co_await responder.StartSse(std::move(headers))) co_return;
  if (quiet_ms > 0) co_await SleepFor(std::chrono::milliseconds(quiet_ms));
  bool early = false;
  for (int i = 0; i < n; ++i) {
    if (responder.client_gone() || !co_await responder.SendSse("event " + std::to_string(i) + pad)) {
      early = true;
      break;
    }
    if (delay_ms > 0) co_await SleepFor(std::chrono::milliseconds(delay_ms));
  }
  if (early) ++probe->sse_stopped_early;
  co_await responder.EndSse();
  if (QueryInt(request.query(), "close", 0) == 1) responder.CloseConnectionAfterResponse();
  ++probe->sse_finished;
}

}  // namespace

HttpHandler MakeTestHandler(Probe* probe) {
  return [probe](const HttpRequest& request, HttpResponder& responder) -> asio::awaitable<void> {
    ++probe->handled;
    std::string_view path = request.path();
    if (path == "/echo") {
      std::string body = request.method + " " + request.target + "\n" + request.body;
      responder.AddHeader("X-Body-Length", std::to_string(request.body.size()));
      co_await responder.Send(200, "text/plain", std::move(body));
    } else if (path == "/sleep") {
      co_await SleepFor(std::chrono::milliseconds(QueryInt(request.query(), "ms", 100)));
      co_await responder.Send(200, "text/plain", "slept\n");
    } else if (path == "/throw") {
      throw std::runtime_error("boom");
    } else if (path == "/none") {
      co_return;
    } else if (path == "/close") {
      responder.AddHeader("Connection", "close");
      co_await responder.Send(200, "text/plain", "bye\n");
    } else if (path == "/inject") {
      HttpHeaders headers{{"X-Good", "1"}, {"X-Bad", "a\r\nSet-Cookie: x=1"}};
      co_await responder.Send(200, "text/plain", "ok\n", std::move(headers));
    } else if (path == "/sse") {
      co_await Sse(request, responder, probe);
    } else if (path == "/sse-wait") {
      // Streams nothing until the client leaves; OnClientGone closes the queue to wake us.
      auto queue = std::make_shared<AsyncQueue<int>>(responder.executor());
      responder.OnClientGone([probe, queue] {
        probe->last_gone_at_us = NowMicros();
        ++probe->gone_fired;
        queue->Close();
      });
      co_await responder.StartSse();
      co_await responder.SendSse("waiting");
      while (co_await queue->Pop()) {
      }
      ++probe->sse_stopped_early;
      ++probe->sse_finished;
    } else if (path == "/sse-throw") {
      co_await responder.StartSse();
      co_await responder.SendSse("first");
      throw std::runtime_error("mid-stream failure");
    } else if (path == "/sse-multiline") {
      co_await responder.StartSse();
      co_await responder.SendSse("line1\nline2\r\nline3", "update");
      co_await responder.EndSse();
    } else {
      co_await responder.Send(404, "text/plain", "not found\n");
    }
  };
}

}  // namespace xserv::http::testing
