// Internal to the CPU backend: a row-major tensor seen as a 2-D array of rows (last dimension =
// columns, all leading dimensions flattened), which is how most CPU loops walk their inputs.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace xserv::kernels::cpu {

template <typename T>
struct Rows {
  T* data;
  int64_t rows;
  int64_t cols;
  int64_t stride;  // elements between consecutive rows
  T* row(int64_t r) const { return data + r * stride; }
};

// Precondition: ExpectRowMajor(t) holds.
template <typename T>
Rows<T> AsRows(const Tensor& t) {
  const int64_t cols = t.dim(-1);
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  const int64_t stride = t.rank >= 2 ? t.stride(-2) : cols;
  return Rows<T>{static_cast<T*>(t.data), rows, cols, stride};
}

}  // namespace xserv::kernels::cpu
