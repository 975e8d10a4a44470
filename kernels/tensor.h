// Tensor: a non-owning, trivially copyable view of memory on one device (CPU or CUDA), the
// currency of the op API (kernels/backend.h). Buffer: the owning allocation behind views.
//
// A Tensor never owns or frees memory; whoever created the Buffer keeps it alive at least as long
// as any view. Views are plain values: copy them freely between threads, but the memory they point
// to follows the owner's threading rules (the engine loop owns model memory).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "common/safetensors/dtype.h"

namespace xserv::kernels {

using DType = safetensors::DType;
using safetensors::DTypeName;
using safetensors::DTypeSize;

enum class DeviceType : uint8_t { kCpu, kCuda };

inline constexpr int kMaxRank = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  DeviceType device = DeviceType::kCpu;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements, row-major when contiguous

  // Dimension `i`; negative counts from the end (-1 is the last dimension).
  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  int64_t stride(int i) const { return strides[i < 0 ? rank + i : i]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  // Same memory, new shape with the same number of elements; contiguous tensors only
  // (XSERV_CHECK). One dimension may be -1 (inferred).
  Tensor Reshape(std::initializer_list<int64_t> new_shape) const;
  // Rows [begin, end) of dimension 0, a view (keeps strides).
  Tensor SliceRows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of the last dimension, a strided view.
  Tensor SliceLast(int64_t begin, int64_t end) const;

  // Splits the last dimension into [a, b] (a * b == dim(-1)), keeping the other strides: a
  // [T, 3*H] column slice becomes [T, heads, head_dim] without a copy.
  Tensor UnflattenLast(int64_t a, int64_t b) const;

  // "BF16[4, 64]" for error messages.
  std::string Describe() const;
};

// A contiguous row-major view of `data`.
Tensor MakeTensor(void* data, DType dtype, DeviceType device,
                  std::initializer_list<int64_t> shape);
Tensor MakeTensor(void* data, DType dtype, DeviceType device, std::span<const int64_t> shape);

// Owns one device allocation and frees it with the deleter of the backend that made it.
// Move-only. `view()` is a contiguous tensor over the whole allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tensor view, std::function<void(void*)> deleter)
      : view_(view), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  const Tensor& view() const { return view_; }
  bool empty() const { return view_.empty(); }

 private:
  void Release();
  Tensor view_;
  std::function<void(void*)> deleter_;
};

}  // namespace xserv::kernels
