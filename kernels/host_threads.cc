#include "kernels/host_threads.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace xserv::kernels {

void ParallelRanges(size_t n, size_t min_per_thread,
                    const std::function<void(size_t, size_t)>& fn) {
  const size_t threads =
      std::clamp<size_t>(std::min<size_t>(std::thread::hardware_concurrency(), 16), 1,
                         std::max<size_t>(1, n / std::max<size_t>(1, min_per_thread)));
  if (threads == 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads);
  size_t started = 0;
  try {
    for (; started < threads; ++started) {
      workers.emplace_back(fn, n * started / threads, n * (started + 1) / threads);
    }
  } catch (const std::system_error&) {  // no thread to be had: this one runs the rest
    fn(n * started / threads, n);
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace xserv::kernels
