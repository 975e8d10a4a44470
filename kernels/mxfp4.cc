#include "kernels/mxfp4.h"

#include <cmath>

#include "absl/strings/str_cat.h"

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
  for (size_t g = 0; g < groups; ++g) {
    const float scale = std::ldexp(1.0f, static_cast<int>(scales[g]) - 127);
    const uint8_t* b = blocks.data() + g * 16;
    float* o = out.data() + g * 32;
    for (int i = 0; i < 16; ++i) {
      o[2 * i] = Fp4E2M1Value(b[i] & 0x0F) * scale;
      o[2 * i + 1] = Fp4E2M1Value(b[i] >> 4) * scale;
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels
