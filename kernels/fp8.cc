#include "kernels/fp8.h"

#include <algorithm>
#include <cmath>

#include "common/safetensors/float_convert.h"

namespace xserv::kernels {

Fp8Blocks QuantizeFp8Blocks(std::span<const float> values, int64_t rows, int64_t cols,
                            int64_t block) {
  const int64_t s1 = (cols + block - 1) / block;
  Fp8Blocks out;
  out.scale_inv.assign(static_cast<size_t>((rows + block - 1) / block * s1), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float& amax = out.scale_inv[(i / block) * s1 + j / block];
      amax = std::max(amax, std::fabs(values[i * cols + j]));
    }
  }
  for (float& s : out.scale_inv) {
    s = safetensors::Bf16ToFloat(safetensors::FloatToBf16(s > 0 ? s / 448.0f : 1.0f));
  }
  out.codes.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      out.codes[i * cols + j] = safetensors::FloatToF8E4M3Saturating(
          values[i * cols + j] / out.scale_inv[(i / block) * s1 + j / block]);
    }
  }
  return out;
}

void DequantizeFp8Blocks(const Fp8Blocks& q, int64_t rows, int64_t cols, int64_t block,
                         std::span<float> values) {
  const int64_t s1 = (cols + block - 1) / block;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      values[i * cols + j] = safetensors::F8E4M3ToFloat(q.codes[i * cols + j]) *
                             q.scale_inv[(i / block) * s1 + j / block];
    }
  }
}

Fp8Rows QuantizeFp8Rows(std::span<const float> values, int64_t rows, int64_t cols,
                        int64_t group) {
  const int64_t groups = (cols + group - 1) / group;
  Fp8Rows out;
  out.codes.resize(static_cast<size_t>(rows * cols));
  out.scales.resize(static_cast<size_t>(rows * groups));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      float amax = 0.0f;
      for (int64_t j = begin; j < end; ++j) amax = std::max(amax, std::fabs(values[i * cols + j]));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      out.scales[i * groups + g] = scale;
      for (int64_t j = begin; j < end; ++j) {
        out.codes[i * cols + j] = safetensors::FloatToF8E4M3Saturating(values[i * cols + j] / scale);
      }
    }
  }
  return out;
}

}  // namespace xserv::kernels
