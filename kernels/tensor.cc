#include "kernels/tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace xserv::kernels {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Tensor Tensor::Reshape(std::initializer_list<int64_t> new_shape) const {
  XSERV_CHECK(is_contiguous());
  XSERV_CHECK(new_shape.size() <= kMaxRank);
  std::array<int64_t, kMaxRank> dims{};
  int infer = -1;
  int64_t known = 1;
  int r = 0;
  for (int64_t d : new_shape) {
    if (d == -1) {
      XSERV_CHECK(infer == -1);
      infer = r;
    } else {
      known *= d;
    }
    dims[r++] = d;
  }
  if (infer >= 0) {
    XSERV_CHECK(known > 0 && numel() % known == 0);
    dims[infer] = numel() / known;
  }
  Tensor out = MakeTensor(data, dtype, device, std::span<const int64_t>(dims.data(), r));
  XSERV_CHECK(out.numel() == numel());
  return out;
}

Tensor Tensor::SliceRows(int64_t begin, int64_t end) const {
  XSERV_CHECK(rank >= 1 && 0 <= begin && begin <= end && end <= shape[0]);
  Tensor out = *this;
  out.shape[0] = end - begin;
  out.data = static_cast<std::byte*>(data) + begin * strides[0] * DTypeSize(dtype);
  return out;
}

Tensor Tensor::SliceLast(int64_t begin, int64_t end) const {
  XSERV_CHECK(rank >= 1 && 0 <= begin && begin <= end && end <= shape[rank - 1]);
  Tensor out = *this;
  out.shape[rank - 1] = end - begin;
  out.data = static_cast<std::byte*>(data) + begin * strides[rank - 1] * DTypeSize(dtype);
  return out;
}

Tensor Tensor::UnflattenLast(int64_t a, int64_t b) const {
  XSERV_CHECK(rank >= 1 && rank < kMaxRank && a * b == shape[rank - 1] && strides[rank - 1] == 1);
  Tensor out = *this;
  out.shape[rank - 1] = a;
  out.strides[rank - 1] = b;
  out.shape[rank] = b;
  out.strides[rank] = 1;
  out.rank = rank + 1;
  return out;
}

std::string Tensor::Describe() const {
  std::string name(DTypeName(dtype));
  return absl::StrCat(name, "[", absl::StrJoin(shape.begin(), shape.begin() + rank, ", "), "]",
                      device == DeviceType::kCuda ? "@cuda" : "");
}

Tensor MakeTensor(void* data, DType dtype, DeviceType device,
                  std::initializer_list<int64_t> shape) {
  return MakeTensor(data, dtype, device, std::span<const int64_t>(shape.begin(), shape.size()));
}

Tensor MakeTensor(void* data, DType dtype, DeviceType device, std::span<const int64_t> shape) {
  XSERV_CHECK(shape.size() <= kMaxRank);
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

Buffer::Buffer(Buffer&& other) noexcept
    : view_(std::exchange(other.view_, Tensor{})), deleter_(std::move(other.deleter_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    view_ = std::exchange(other.view_, Tensor{});
    deleter_ = std::move(other.deleter_);
  }
  return *this;
}

Buffer::~Buffer() { Release(); }

void Buffer::Release() {
  if (view_.data != nullptr && deleter_) deleter_(view_.data);
  view_ = Tensor{};
}

}  // namespace xserv::kernels
