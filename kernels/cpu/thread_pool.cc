#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace xserv::kernels::cpu {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t max_parts =
      std::min<int64_t>(num_threads(), (n + min_chunk - 1) / std::max<int64_t>(1, min_chunk));
  if (max_parts <= 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + max_parts - 1) / max_parts;
  const int64_t parts = (n + chunk - 1) / chunk;  // non-empty chunks only; workers >= parts idle
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    pending_ = static_cast<int>(parts) - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(0, std::min(n, chunk));  // the caller's share is chunk 0
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t begin, end;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      begin = index * chunk_;
      if (begin >= n_) continue;  // fewer chunks than workers this time
      end = std::min(n_, begin + chunk_);
      fn = fn_;
    }
    (*fn)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace xserv::kernels::cpu
