// Plain views passed from the C++20 host side (CudaBackend ops, which validate Tensors) to the
// C++17 launchers in the .cu files. Nothing here depends on absl or <span>, so every .cu file can
// include it. Trivially copyable; passed to kernels by value.
#pragma once

#include <cstdint>

namespace xserv::kernels::cuda {

// Element types the kernels know. Launchers map DType onto these.
enum class ElemType : uint8_t { kF32, kBF16, kF16 };

// A 2-D array of rows: `cols` contiguous elements per row, `stride` elements between rows (a
// column slice of a wider matrix has stride > cols). Leading tensor dims are already flattened.
struct RowsView {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

// The top-k experts' outputs of T tokens, to be combined per token: row t is the sum over slots
// j < k, in slot order, of weights[t * k + j] * y[t * k + j] (f32 rows of `cols`); a token with
// an id outside [0, experts) combines to NaN (moe_combine.cuh).
struct MoeCombineRows {
  const float* y = nullptr;  // [T * k, cols]
  const int32_t* ids = nullptr;      // [T, k]
  const float* weights = nullptr;    // [T, k]
  int k = 0;
  int experts = 0;
};

// Part of a weight to read into L2 ahead of the matmul that will stream it (GemvArgs::prefetch):
// bytes [offset, offset + bytes) of each of `rows` rows, `stride` bytes apart from `base`; offset
// and bytes multiples of 16 (the bulk prefetch's unit), rows = 0 for nothing (l2_prefetch.h).
struct L2Prefetch {
  const void* base = nullptr;
  int64_t stride = 0;
  int32_t rows = 0;
  int32_t offset = 0;
  int32_t bytes = 0;
};

// The bit pattern kernels write where inputs were invalid (an out-of-range id or slot that the
// host could not check without a device sync): a quiet NaN, so a bad step is loud in tests.
inline constexpr uint16_t kBf16NaNBits = 0x7FC0;

}  // namespace xserv::kernels::cuda
