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

// A normalisation's operands: bf16 CUDA rows x and out of one shape, a bf16 weight [cols].
inline absl::Status ExpectNormOperands(const char* op, const Tensor& x, const Tensor& weight,
                                       const Tensor& out) {
  for (const Tensor* t : {&x, &weight, &out}) {
    if (absl::Status s = ExpectCuda(op, "operand", *t); !s.ok()) return s;
    if (absl::Status s = ExpectDType(op, "operand", *t, DType::kBF16); !s.ok()) return s;
  }
  if (absl::Status s = ExpectRowMajor(op, "x", x); !s.ok()) return s;
  if (absl::Status s = ExpectRowMajor(op, "out", out); !s.ok()) return s;
  if (absl::Status s = ExpectSameShape(op, x, out); !s.ok()) return s;
  if (absl::Status s = ExpectRank(op, "weight", weight, 1); !s.ok()) return s;
  if (absl::Status s = ExpectDim(op, "weight", weight, 0, x.dim(-1)); !s.ok()) return s;
  return ExpectIntRange(op, "rows", AsRows(x).rows);
}

// AddRmsNorm's: ExpectNormOperands plus a bf16 CUDA residual of x's shape.
inline absl::Status ExpectAddRmsNormOperands(const char* op, const Tensor& x,
                                             const Tensor& residual, const Tensor& weight,
                                             const Tensor& out) {
  if (absl::Status s = ExpectNormOperands(op, x, weight, out); !s.ok()) return s;
  if (absl::Status s = ExpectCuda(op, "residual", residual); !s.ok()) return s;
  if (absl::Status s = ExpectDType(op, "residual", residual, DType::kBF16); !s.ok()) return s;
  if (absl::Status s = ExpectRowMajor(op, "residual", residual); !s.ok()) return s;
  return ExpectSameShape(op, x, residual);
}

}  // namespace xserv::kernels::cuda
