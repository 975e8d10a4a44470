#include "kernels/cuda/l2_prefetch.h"

#include <cstdint>

namespace xserv::kernels::cuda {

L2Prefetch L2PrefetchFor(const void* base, int64_t stride, int64_t rows, int64_t row_bytes,
                         int64_t budget) {
  constexpr int64_t kMax = INT32_MAX;
  if (base == nullptr || rows <= 0 || row_bytes <= 0 || budget <= 0 || rows > kMax ||
      reinterpret_cast<uintptr_t>(base) % 16 != 0 || stride % 16 != 0 || stride < row_bytes) {
    return {};
  }
  const int64_t offset = row_bytes > kGemvPreloadBytes ? kGemvPreloadBytes : 0;
  const int64_t bytes = L2PrefetchRowBytes(row_bytes - offset, budget, rows);
  if (bytes == 0 || bytes > kMax) return {};
  return L2Prefetch{.base = base,
                    .stride = stride,
                    .rows = static_cast<int32_t>(rows),
                    .offset = static_cast<int32_t>(offset),
                    .bytes = static_cast<int32_t>(bytes)};
}

}  // namespace xserv::kernels::cuda
