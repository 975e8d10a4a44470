// Admission: one in-flight slot of RouterState, held for the life of one generation request, HTTP
// or gRPC, so both APIs share one budget and one refusal: a draining router refuses new requests
// (503 / UNAVAILABLE); otherwise a slot is taken at once when one is free, or the request waits in
// a bounded queue (polling every 5 ms) up to limits.queue_timeout. Over the queue bound, on
// timeout, or when the client leaves while queued, it is refused as at capacity (429 /
// RESOURCE_EXHAUSTED); when the drain deadline passes, as draining.
//
// Used on one coroutine (the request's); the counters in RouterState are atomics.
#pragma once

#include <chrono>
#include <functional>
#include <utility>

#include "absl/status/status.h"
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

  // OK once a slot is held. UNAVAILABLE while the router drains (a request queued before the
  // drain began still waits for its slot, until the drain deadline); RESOURCE_EXHAUSTED over the
  // queue bound, on timeout, or when the client leaves while queued (`gone`, optional).
  boost::asio::awaitable<absl::Status> Acquire(std::function<bool()> gone = {}) {
    bool admitted = false;
    if (!state_.draining) admitted = co_await WaitForSlot(std::move(gone));
    // Named, not a temporary in co_return: GCC 12 mishandles those in coroutines.
    const absl::Status status = admitted ? absl::OkStatus() : Refusal();
    co_return status;
  }

 private:
  absl::Status Refusal() const {
    if (state_.draining) return absl::UnavailableError("the router is shutting down");
    return absl::ResourceExhaustedError("the server is at capacity; retry later");
  }

  boost::asio::awaitable<bool> WaitForSlot(std::function<bool()> gone) {
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
