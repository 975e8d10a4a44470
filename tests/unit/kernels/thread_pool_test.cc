// ThreadPool::ParallelFor (kernels/cpu/thread_pool.h): every index of [0, n) is visited exactly
// once, by disjoint contiguous ranges, for any n, min_chunk and pool size, and the pool survives
// many back-to-back calls (the engine makes thousands per step).
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace xserv::kernels::cpu {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {0, 1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), std::max(1, threads));
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 9, 16, 31, 100, 1000}) {
      for (int64_t min_chunk : {0, 1, 2, 3, 8, 64, 5000}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n << ", min_chunk "
                                          << min_chunk);
        std::vector<std::atomic<int>> hits(n);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          ranges.emplace_back(begin, end);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
        // Ranges are non-empty and at most one per thread; min_chunk caps their number at
        // ceil(n / min_chunk), so tiny loops are not spread over threads.
        EXPECT_LE(ranges.size(), static_cast<size_t>(pool.num_threads()));
        if (min_chunk > 0) {
          EXPECT_LE(static_cast<int64_t>(ranges.size()), (n + min_chunk - 1) / min_chunk);
        }
        for (const auto& [begin, end] : ranges) EXPECT_LT(begin, end);
        if (n == 0) {
          EXPECT_TRUE(ranges.empty());
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ManyBackToBackCallsOfChangingSize) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  int64_t want = 0;
  for (int call = 0; call < 5000; ++call) {
    const int64_t n = call % 11;  // includes 0 and sizes below the thread count
    want += n * (n - 1) / 2;
    pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      int64_t sum = 0;
      for (int64_t i = begin; i < end; ++i) sum += i;
      total.fetch_add(sum);
    });
    ASSERT_EQ(total.load(), want) << "after call " << call;  // ParallelFor returned only when done
  }
}

TEST(ThreadPoolTest, DestroysCleanlyWhileIdle) {
  for (int i = 0; i < 50; ++i) {
    auto pool = std::make_unique<ThreadPool>(3);
    if (i % 2 == 0) pool->ParallelFor(10, 1, [](int64_t, int64_t) {});
  }
}

}  // namespace
}  // namespace xserv::kernels::cpu
