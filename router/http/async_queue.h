// AsyncQueue<T>: hands values from any thread (gRPC callback threads, worker threads) to ONE
// coroutine running on an Asio strand. It replaces asio::experimental::channel, which Boost 1.74
// lacks.
//
// Ownership and threading:
//   - Push(), Close(), TryPop() and size() may be called from any thread at any time.
//   - Pop() / PopAll() have a single consumer: one coroutine at a time, running on the executor
//     given to the constructor. That executor must serialise its handlers (a strand, or an
//     io_context run by one thread); HttpResponder::executor() is such a strand. Pop() checks it.
//   - Destroying the queue closes it (a pending Pop() returns nullopt). The queue must be destroyed
//     before the io_context of its executor (i.e. before the HttpServer). Recommended pattern: the
//     handler coroutine owns the queue (std::make_shared), producers such as gRPC reactors keep a
//     std::weak_ptr and lock() it for each Push(), so the queue dies with the handler.
//
// How it works (the "timer as condition variable" trick): the consumer waits on a steady_timer that
// never expires; a producer that finds the consumer waiting posts one wake-up to the consumer's
// strand, which cancels the timer. Because the wake-up runs on the same strand as the consumer, it
// can never run between the consumer's "queue empty, I am waiting" and its async_wait, so no
// wake-up is lost. Values pushed before Close() are still delivered; Pop() returns nullopt only once
// the queue is closed AND drained.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "common/status.h"
#include "router/http/asio_includes.h"

namespace xserv::http {

template <typename T>
class AsyncQueue {
 public:
  explicit AsyncQueue(boost::asio::any_io_executor consumer_executor)
      : state_(std::make_shared<State>(std::move(consumer_executor))) {}
  ~AsyncQueue() { Close(); }

  AsyncQueue(const AsyncQueue&) = delete;
  AsyncQueue& operator=(const AsyncQueue&) = delete;

  // Any thread. Returns false (and drops `value`) when the queue is closed.
  bool Push(T value) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->closed) return false;
      state_->items.push_back(std::move(value));
      wake = state_->ClaimWakeLocked();
    }
    if (wake) State::PostWake(state_);
    return true;
  }

  // Any thread; idempotent. Wakes the consumer; later Push() calls fail.
  void Close() {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->closed) return;
      state_->closed = true;
      wake = state_->ClaimWakeLocked();
    }
    if (wake) State::PostWake(state_);
  }

  // Any thread. Non-blocking: the next value if one is queued.
  std::optional<T> TryPop() {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->items.empty()) return std::nullopt;
    T value = std::move(state_->items.front());
    state_->items.pop_front();
    return value;
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->closed;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->items.size();
  }

  // Consumer only. The next value, or nullopt once the queue is closed and empty.
  boost::asio::awaitable<std::optional<T>> Pop() {
    std::shared_ptr<State> s = state_;  // keeps the state alive even if *this is destroyed
    co_await s->CheckExecutor();
    for (;;) {
      std::optional<T> value;
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (!s->items.empty()) {
          value.emplace(std::move(s->items.front()));
          s->items.pop_front();
        } else if (s->closed) {
          break;
        } else {
          s->waiting = true;
        }
      }
      if (value.has_value()) co_return value;
      co_await s->Wait();
    }
    co_return std::nullopt;
  }

  // Consumer only. Everything queued (at least one value), or an empty vector once the queue is
  // closed and empty. Lets a streaming handler coalesce bursts into one write.
  boost::asio::awaitable<std::vector<T>> PopAll() {
    std::shared_ptr<State> s = state_;
    co_await s->CheckExecutor();
    for (;;) {
      std::vector<T> values;
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (!s->items.empty()) {
          values.reserve(s->items.size());
          for (T& v : s->items) values.push_back(std::move(v));
          s->items.clear();
        } else if (s->closed) {
          break;
        } else {
          s->waiting = true;
        }
      }
      if (!values.empty()) co_return values;
      co_await s->Wait();
    }
    co_return std::vector<T>{};
  }

 private:
  struct State {
    explicit State(boost::asio::any_io_executor ex)
        : executor(std::move(ex)),
          timer(executor, boost::asio::steady_timer::time_point::max()) {}

    // Called with `mu` held: true when the caller must post a wake-up (at most one in flight).
    bool ClaimWakeLocked() {
      if (!waiting || wake_posted) return false;
      wake_posted = true;
      return true;
    }

    static void PostWake(std::shared_ptr<State> s) {
      State* raw = s.get();
      boost::asio::post(raw->executor, [s = std::move(s)] {
        {
          std::lock_guard<std::mutex> lock(s->mu);
          s->wake_posted = false;
        }
        s->timer.cancel();  // on the consumer's strand: the only place the timer is touched
      });
    }

    boost::asio::awaitable<void> CheckExecutor() {
      auto current = co_await boost::asio::this_coro::executor;
      XSERV_CHECK(current == executor);  // Pop() must run on the consumer executor
    }

    // Sleeps until a wake-up (or a spurious one); the caller re-checks the queue.
    boost::asio::awaitable<void> Wait() {
      boost::system::error_code ec;
      co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      std::lock_guard<std::mutex> lock(mu);
      waiting = false;
    }

    mutable std::mutex mu;
    std::deque<T> items;         // guarded by mu
    bool closed = false;         // guarded by mu
    bool waiting = false;        // guarded by mu: the consumer is (about to be) in Wait()
    bool wake_posted = false;    // guarded by mu: a wake-up is queued on the executor
    boost::asio::any_io_executor executor;
    boost::asio::steady_timer timer;  // consumer executor only; never expires, cancel = wake
  };

  std::shared_ptr<State> state_;
};

}  // namespace xserv::http
