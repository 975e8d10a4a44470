#include "kernels/fp8.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "kernels/host_threads.h"

namespace xserv::kernels {

Fp8Blocks QuantizeFp8Blocks(std::span<const float> values, int64_t rows, int64_t cols,
                            int64_t block) {
  const int64_t s1 = (cols + block - 1) / block;
  const int64_t bands = (rows + block - 1) / block;
  Fp8Blocks out;
  out.scale_inv.assign(static_cast<size_t>(bands * s1), 0.0f);
  out.codes.resize(static_cast<size_t>(rows * cols));
  // Bands of `block` rows are independent. An 8B model quantised on load (--quantization fp8) is
  // 7.6 G values: one thread took minutes, so bands go to several threads.
  ParallelRanges(static_cast<size_t>(bands), 1, [&](size_t first, size_t last) {
    for (auto band = static_cast<int64_t>(first); band < static_cast<int64_t>(last); ++band) {
      float* scales = out.scale_inv.data() + band * s1;
      const int64_t r0 = band * block, r1 = std::min(rows, r0 + block);
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          scales[j / block] = std::max(scales[j / block], std::fabs(values[i * cols + j]));
        }
      }
      for (int64_t b = 0; b < s1; ++b) {
        const float s = scales[b];
        scales[b] = safetensors::Bf16ToFloat(safetensors::FloatToBf16(s > 0 ? s / 448.0f : 1.0f));
      }
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          out.codes[i * cols + j] =
              safetensors::FloatToF8E4M3Saturating(values[i * cols + j] / scales[j / block]);
        }
      }
    }
  });
  return out;
}

void DequantizeFp8Blocks(const Fp8Blocks& q, int64_t rows, int64_t cols, int64_t block,
                         std::span<float> values) {
  const int64_t s1 = (cols + block - 1) / block;
  // Every element on its own: rows split across threads like the quantiser's bands.
  ParallelRanges(static_cast<size_t>(rows), static_cast<size_t>(block), [&](size_t r0, size_t r1) {
    for (auto i = static_cast<int64_t>(r0); i < static_cast<int64_t>(r1); ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        values[i * cols + j] = safetensors::F8E4M3ToFloat(q.codes[i * cols + j]) *
                               q.scale_inv[(i / block) * s1 + j / block];
      }
    }
  });
}

float QuantizeFp8Group(std::span<const float> values, uint8_t* codes) {
  float amax = 0.0f;
  for (const float v : values) amax = std::max(amax, std::fabs(v));
  // 1 for an all-zero group, and for one so small that amax / 448 underflows (a zero scale would
  // make every code infinite).
  const float quotient = amax / 448.0f;
  const float scale = quotient > 0.0f ? quotient : 1.0f;
  for (size_t j = 0; j < values.size(); ++j) {
    codes[j] = safetensors::FloatToF8E4M3Saturating(values[j] / scale);
  }
  return scale;
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
      out.scales[i * groups + g] = QuantizeFp8Group(
          values.subspan(static_cast<size_t>(i * cols + begin), static_cast<size_t>(end - begin)),
          out.codes.data() + i * cols + begin);
    }
  }
  return out;
}

std::vector<float> Fp8RowScales(std::span<const float> scale_inv, int64_t rows, int64_t cols,
                                int64_t block) {
  const int64_t groups = (cols + block - 1) / block;
  std::vector<float> out(static_cast<size_t>(groups * rows));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) out[g * rows + r] = scale_inv[(r / block) * groups + g];
  }
  return out;
}

Fp8Blocks TransposeFp8Blocks(std::span<const uint8_t> codes, std::span<const float> scale_inv,
                             int64_t rows, int64_t cols, int64_t block) {
  const auto transpose = [](auto in, int64_t r_count, int64_t c_count) {
    std::vector<std::remove_const_t<typename decltype(in)::element_type>> out(in.size());
    for (int64_t r = 0; r < r_count; ++r) {
      for (int64_t c = 0; c < c_count; ++c) out[c * r_count + r] = in[r * c_count + c];
    }
    return out;
  };
  return {.codes = transpose(codes, rows, cols),
          .scale_inv = transpose(scale_inv, (rows + block - 1) / block, (cols + block - 1) / block)};
}

}  // namespace xserv::kernels
