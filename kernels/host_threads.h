// Splitting a large host-side loop (weight decoding and quantisation at load time) across
// threads. Pure helper, safe from any thread.
#pragma once

#include <cstddef>
#include <functional>

namespace xserv::kernels {

// Runs fn(begin, end) over [0, n) in contiguous ranges on up to 16 threads (hardware permitting),
// each range at least `min_per_thread` long; fn must not depend on how [0, n) is split. When no
// thread can be started, the calling thread runs the rest itself.
void ParallelRanges(size_t n, size_t min_per_thread,
                    const std::function<void(size_t, size_t)>& fn);

}  // namespace xserv::kernels
