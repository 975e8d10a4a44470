// AsyncQueue: ordering, Close semantics, multi-producer stress and lost-wakeup detection, with real
// producer threads and a consumer coroutine on a strand of a multi-threaded io_context.
#include "router/http/async_queue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace xserv::http {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// An io_context run by `threads` threads for the duration of a test.
class Runner {
 public:
  explicit Runner(int threads) : work_(asio::make_work_guard(context_)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { context_.run(); });
  }
  ~Runner() {
    work_.reset();
    context_.stop();
    for (auto& t : threads_) t.join();
  }
  asio::any_io_executor NewStrand() { return asio::make_strand(context_); }

  // Runs `coroutine` on `executor` and waits (bounded) for its result.
  template <typename T>
  std::optional<T> RunOn(asio::any_io_executor executor, asio::awaitable<T> coroutine,
                         std::chrono::milliseconds timeout = 20s) {
    std::promise<T> promise;
    std::future<T> future = promise.get_future();
    asio::co_spawn(executor, std::move(coroutine), [&promise](std::exception_ptr e, T value) {
      if (e) {
        promise.set_exception(e);
      } else {
        promise.set_value(std::move(value));
      }
    });
    if (future.wait_for(timeout) != std::future_status::ready) {
      ADD_FAILURE() << "coroutine did not finish in time (lost wake-up?)";
      std::abort();  // the coroutine still references locals of this frame
    }
    return future.get();
  }

 private:
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
};

asio::awaitable<std::vector<int>> Drain(AsyncQueue<int>* queue) {
  std::vector<int> out;
  while (auto v = co_await queue->Pop()) out.push_back(*v);
  co_return out;
}

TEST(AsyncQueueTest, DeliversInOrderAndDrainsBeforeClose) {
  Runner runner(2);
  auto strand = runner.NewStrand();
  AsyncQueue<int> queue(strand);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(queue.Push(i));
  std::thread producer([&] {
    for (int i = 5; i < 1000; ++i) queue.Push(i);
    queue.Close();
  });
  auto values = runner.RunOn(strand, Drain(&queue));
  producer.join();
  ASSERT_TRUE(values.has_value());
  ASSERT_EQ(values->size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ((*values)[i], i);
  EXPECT_FALSE(queue.Push(7));  // closed
  EXPECT_TRUE(queue.closed());
  EXPECT_EQ(queue.size(), 0u);
}

TEST(AsyncQueueTest, CloseWakesAWaitingConsumerAndLaterPopsReturnAtOnce) {
  Runner runner(2);
  auto strand = runner.NewStrand();
  AsyncQueue<int> queue(strand);
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    queue.Close();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto first = runner.RunOn(strand, queue.Pop());
  closer.join();
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(first->has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  auto again = runner.RunOn(strand, queue.Pop());
  EXPECT_FALSE(again->has_value());
  queue.Close();  // idempotent
}

TEST(AsyncQueueTest, DestroyingTheQueueWakesThePopper) {
  Runner runner(2);
  auto strand = runner.NewStrand();
  auto queue = std::make_unique<AsyncQueue<int>>(strand);
  std::promise<bool> got_nullopt;
  asio::co_spawn(
      strand,
      [q = queue.get()]() -> asio::awaitable<bool> { co_return !(co_await q->Pop()).has_value(); },
      [&](std::exception_ptr, bool v) { got_nullopt.set_value(v); });
  std::this_thread::sleep_for(20ms);
  queue.reset();
  auto f = got_nullopt.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST(AsyncQueueTest, TryPopAndPopAllCoalesce) {
  Runner runner(1);
  auto strand = runner.NewStrand();
  AsyncQueue<std::string> queue(strand);
  EXPECT_FALSE(queue.TryPop().has_value());
  queue.Push("a");
  EXPECT_EQ(queue.TryPop().value(), "a");
  queue.Push("b");
  queue.Push("c");
  auto batch = runner.RunOn(strand, queue.PopAll());
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(*batch, (std::vector<std::string>{"b", "c"}));
  queue.Close();
  auto empty = runner.RunOn(strand, queue.PopAll());
  EXPECT_TRUE(empty->empty());
}

// Several producer threads hammer the queue while the consumer keeps draining it: every value
// arrives exactly once and in per-producer order.
TEST(AsyncQueueTest, MultiProducerStress) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 50000;
  Runner runner(2);
  for (int round = 0; round < 3; ++round) {
    auto strand = runner.NewStrand();
    AsyncQueue<std::pair<int, int>> queue(strand);
    std::atomic<int> producers_done{0};
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&, p] {
        for (int i = 0; i < kPerProducer; ++i) {
          queue.Push({p, i});
          if (i % 1024 == 0) std::this_thread::yield();
        }
        if (++producers_done == kProducers) queue.Close();
      });
    }
    auto consume = [&]() -> asio::awaitable<int> {
      std::vector<int> next(kProducers, 0);
      int total = 0;
      bool use_pop_all = round % 2 == 1;
      for (;;) {
        std::vector<std::pair<int, int>> batch;
        if (use_pop_all) {
          batch = co_await queue.PopAll();
          if (batch.empty()) break;
        } else {
          auto v = co_await queue.Pop();
          if (!v) break;
          batch.push_back(*v);
        }
        for (auto [p, i] : batch) {
          if (next[p] != i) co_return -1;  // lost, duplicated or reordered
          ++next[p];
          ++total;
        }
      }
      co_return total;
    };
    auto total = runner.RunOn(strand, consume());
    for (auto& t : producers) t.join();
    ASSERT_TRUE(total.has_value());
    EXPECT_EQ(*total, kProducers * kPerProducer) << "round " << round;
  }
}

// Ping-pong: the consumer is (almost) always waiting when the producer pushes, which is exactly the
// window where a wake-up can be lost. A lost one shows up as a timeout.
TEST(AsyncQueueTest, NoLostWakeupsInPingPong) {
  constexpr int kRounds = 10000;
  Runner runner(2);
  auto strand = runner.NewStrand();
  AsyncQueue<int> requests(strand);
  std::atomic<int> acked{-1};
  std::thread producer([&] {
    for (int i = 0; i < kRounds; ++i) {
      requests.Push(i);
      auto deadline = std::chrono::steady_clock::now() + 5s;
      while (acked.load(std::memory_order_acquire) != i) {
        if (std::chrono::steady_clock::now() > deadline) {
          ADD_FAILURE() << "lost wake-up at round " << i;
          requests.Close();
          return;
        }
        if (i % 2 == 0) std::this_thread::yield();  // vary the timing
      }
    }
    requests.Close();
  });
  auto consume = [&]() -> asio::awaitable<int> {
    int count = 0;
    while (auto v = co_await requests.Pop()) {
      acked.store(*v, std::memory_order_release);
      ++count;
    }
    co_return count;
  };
  auto count = runner.RunOn(strand, consume(), 60s);
  producer.join();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, kRounds);
}

}  // namespace
}  // namespace xserv::http
