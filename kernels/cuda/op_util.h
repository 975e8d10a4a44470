// Internal to the CUDA backend's op files (C++20 host code): argument checks on top of
// kernels/op_checks.h, and Tensor -> kernel-view conversions. Not for .cu files.
#pragma once

#include <optional>

#include "kernels/cuda/kernel_types.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cuda {

inline absl::Status ExpectCuda(const char* op, const char* name, const Tensor& t) {
  if (t.device == DeviceType::kCuda && t.data != nullptr) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " must be a CUDA tensor, got ", t.Describe()));
}

// Kernels index grids with 32-bit block counts and rows with int64: keep counts in int range.
inline absl::Status ExpectIntRange(const char* op, const char* what, int64_t value) {
  if (value >= 0 && value <= int64_t{0x7fffffff}) return absl::OkStatus();
  return OpError(op, absl::StrCat(what, " = ", value, " outside the int range"));
}

inline std::optional<ElemType> ElemTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ElemType::kF32;
    case DType::kBF16: return ElemType::kBF16;
    case DType::kF16: return ElemType::kF16;
    default: return std::nullopt;
  }
}

// Precondition: ExpectRowMajor(t) holds (leading dims flatten into rows).
inline RowsView AsRows(const Tensor& t) {
  const int64_t cols = t.rank >= 1 ? t.dim(-1) : 1;
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  const int64_t stride = t.rank >= 2 ? t.stride(-2) : cols;
  return RowsView{t.data, rows, cols, stride};
}

}  // namespace xserv::kernels::cuda
