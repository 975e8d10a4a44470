#include "common/safetensors/tensor_view.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace xserv::safetensors {

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<uint64_t> CheckedByteSize(DType dtype, std::span<const int64_t> shape) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t elements = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t dim = shape[i];
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("dim ", i, " is negative (", dim, ")"));
    }
    if (dim != 0 && elements > kMax / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape overflows int64 at dim ", i, " (", dim, ")"));
    }
    elements *= dim;
  }
  const int64_t element_size = static_cast<int64_t>(DTypeSize(dtype));
  if (elements > kMax / element_size) {
    return absl::InvalidArgumentError("byte size of the shape overflows int64");
  }
  return static_cast<uint64_t>(elements * element_size);
}

}  // namespace xserv::safetensors
