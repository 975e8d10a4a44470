// Admission: one in-flight slot of RouterState, held for the life of one generation request, HTTP
// or gRPC, so both APIs share one budget. A slot is taken at once when one is free; otherwise the
// request waits in a bounded queue (polling every 5 ms) up to limits.queue_timeout. Over the
// queue bound, on timeout, or when the client leaves while queued, Acquire fails (429 /
// RESOURCE_EXHAUSTED); when the drain deadline passes too (the caller answers 503 / UNAVAILABLE
// while the router drains).
//
// Used on one coroutine (the request's); the counters in RouterState are atomics.
#pragma once

#include <chrono>
#include <functional>

#include "router/http/asio_includes.h"
#include "router/server/router_state.h"

namespace xserv::router {

class Admission {
 public:
  explicit Admission(RouterState& state) : state_(state) {}
  ~Admission() {
    if (admitted_) --state_.in_flight;
  }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // `gone` (optional) reports that the client left while queued.
  boost::asio::awaitable<bool> Acquire(std::function<bool()> gone = {}) {
    namespace asio = boost::asio;
    if (TryTake()) co_return true;
    if (++state_.queued > state_.limits.max_queued) {
      --state_.queued;
      co_return false;
    }
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + state_.limits.queue_timeout;
    bool ok = false;
    while (std::chrono::steady_clock::now() < deadline && !(gone && gone()) &&
           !state_.shutdown.fired()) {
      if (TryTake()) {
        ok = true;
        break;
      }
      timer.expires_after(std::chrono::milliseconds(5));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    --state_.queued;
    co_return ok;
  }

 private:
  bool TryTake() {
    int current = state_.in_flight.load();
    while (current < state_.limits.max_in_flight) {
      if (state_.in_flight.compare_exchange_weak(current, current + 1)) return admitted_ = true;
    }
    return false;
  }

  RouterState& state_;
  bool admitted_ = false;
};

}  // namespace xserv::router
