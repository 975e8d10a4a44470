#include "kernels/cuda/l2_prefetch.h"

#include <algorithm>
#include <cstdint>

namespace xserv::kernels::cuda {

L2Prefetch L2PrefetchFor(const void* base, int64_t stride, int64_t rows, int64_t row_bytes,
                         int64_t budget) {
  constexpr int64_t kLine = 128;
  constexpr int64_t kMax = INT32_MAX;
  if (base == nullptr || rows <= 0 || row_bytes <= 0 || budget <= 0 || rows > kMax ||
      reinterpret_cast<uintptr_t>(base) % 16 != 0 || stride % 16 != 0 || stride < row_bytes) {
    return {};
  }
  const int64_t offset = row_bytes > kGemvPreloadBytes ? kGemvPreloadBytes : 0;
  const int64_t rest = (row_bytes - offset) / 16 * 16;  // whole 16-byte units of the row
  const int64_t bytes = std::min(budget / rows / kLine * kLine, rest);
  if (bytes < 16 || bytes > kMax) return {};
  return L2Prefetch{.base = base,
                    .stride = stride,
                    .rows = static_cast<int32_t>(rows),
                    .offset = static_cast<int32_t>(offset),
                    .bytes = static_cast<int32_t>(bytes)};
}

}  // namespace xserv::kernels::cuda
