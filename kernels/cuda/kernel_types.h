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

// The bit pattern kernels write where inputs were invalid (an out-of-range id or slot that the
// host could not check without a device sync): a quiet NaN, so a bad step is loud in tests.
inline constexpr uint16_t kBf16NaNBits = 0x7FC0;

}  // namespace xserv::kernels::cuda
