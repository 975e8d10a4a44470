#include "kernels/mxfp4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/host_threads.h"

namespace xserv::kernels {

float Fp4E2M1Value(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

absl::Status DequantizeMxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                             int64_t num_rows, int64_t num_groups, std::span<float> out) {
  const auto groups = static_cast<size_t>(num_rows * num_groups);
  if (num_rows < 0 || num_groups < 0 || blocks.size() != groups * 16 ||
      scales.size() != groups || out.size() != groups * 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DequantizeMxfp4: ", num_rows, " rows x ", num_groups, " groups need ", groups * 16,
        " block bytes, ", groups, " scales and ", groups * 32, " outputs; got ", blocks.size(),
        ", ", scales.size(), ", ", out.size()));
  }
  // Both values of every byte, low nibble first; products with a power of two are exact.
  static const std::array<std::array<float, 2>, 256> kPairs = [] {
    std::array<std::array<float, 2>, 256> pairs{};
    for (int b = 0; b < 256; ++b) {
      pairs[b] = {Fp4E2M1Value(static_cast<uint8_t>(b & 0x0F)),
                  Fp4E2M1Value(static_cast<uint8_t>(b >> 4))};
    }
    return pairs;
  }();
  auto decode = [&](size_t first, size_t last) {
    for (size_t g = first; g < last; ++g) {
      const float scale = std::ldexp(1.0f, static_cast<int>(scales[g]) - 127);
      const uint8_t* b = blocks.data() + g * 16;
      float* o = out.data() + g * 32;
      for (int i = 0; i < 16; ++i) {
        o[2 * i] = kPairs[b[i]][0] * scale;
        o[2 * i + 1] = kPairs[b[i]][1] * scale;
      }
    }
  };
  // A gpt-oss-20b checkpoint holds 19 G expert values: decoding them on one thread took most of
  // a 200 s start-up on the H200 host. Large tensors are split across threads.
  ParallelRanges(groups, size_t{1} << 16, decode);
  return absl::OkStatus();
}

}  // namespace xserv::kernels
