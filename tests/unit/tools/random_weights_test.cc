// Deterministic weight generation and the MXFP4 encoder (checked against the kernels' decoder).
#include "worker/tools/random_weights.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mxfp4.h"

namespace xserv::tools {
namespace {

TEST(RandomWeightsTest, DependsOnSeedAndNameOnly) {
  const std::vector<float> a = RandomValues(5, "w", 1000, Init::kNormal);
  EXPECT_EQ(a, RandomValues(5, "w", 1000, Init::kNormal));
  EXPECT_NE(a, RandomValues(6, "w", 1000, Init::kNormal));
  EXPECT_NE(a, RandomValues(5, "v", 1000, Init::kNormal));
  // A prefix of a longer draw: values do not depend on the tensor size.
  const std::vector<float> longer = RandomValues(5, "w", 2000, Init::kNormal);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin()));
  double sum = 0, sum_sq = 0;
  for (float v : longer) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(sum / longer.size(), 0.0, 0.003);
  EXPECT_NEAR(std::sqrt(sum_sq / longer.size()), 0.02, 0.002);
  for (float v : RandomValues(5, "norm", 1000, Init::kNorm)) {
    EXPECT_GT(v, 0.4f);
    EXPECT_LT(v, 1.6f);
  }
}

TEST(RandomWeightsTest, Bf16EncodingRoundsToNearest) {
  const std::vector<float> values = {1.0f, -2.5f, 1.0f + 0x1.0p-9f};
  const std::vector<std::byte> bytes = EncodeFloats(values, safetensors::DType::kBF16);
  ASSERT_EQ(bytes.size(), 6u);
  uint16_t bits[3];
  std::memcpy(bits, bytes.data(), sizeof(bits));
  EXPECT_EQ(bits[0], 0x3f80);
  EXPECT_EQ(bits[1], 0xc020);
  EXPECT_EQ(bits[2], 0x3f80);  // a tie rounds to even
  EXPECT_EQ(EncodeFloats(values, safetensors::DType::kF32).size(), 12u);
}

TEST(RandomWeightsTest, Mxfp4RoundTripsThroughTheKernelDecoder) {
  constexpr int64_t kRows = 6, kIn = 64;
  std::vector<float> values = RandomValues(1, "experts", kRows * kIn, Init::kNormal);
  // Row 0 holds exactly representable values: E2M1 codes times 2^-3.
  const float exact[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < kIn; ++i) values[i] = (i % 2 ? -1.0f : 1.0f) * exact[i % 8] * 0.125f;
  for (int i = 0; i < kIn; ++i) values[kIn + i] = 0.0f;  // an all-zero row
  const Mxfp4Tensor q = QuantizeMxfp4(values, kRows, kIn);
  ASSERT_EQ(q.blocks.size(), static_cast<size_t>(kRows * kIn / 2));
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(kRows * kIn / 32));
  std::vector<float> decoded(values.size());
  const auto* blocks = reinterpret_cast<const uint8_t*>(q.blocks.data());
  const auto* scales = reinterpret_cast<const uint8_t*>(q.scales.data());
  ASSERT_TRUE(kernels::DequantizeMxfp4({blocks, q.blocks.size()}, {scales, q.scales.size()}, kRows,
                                       kIn / 32, decoded)
                  .ok());
  for (int i = 0; i < 2 * kIn; ++i) EXPECT_EQ(decoded[i], values[i]) << i;
  for (int64_t g = 2 * kIn / 32; g < kRows * kIn / 32; ++g) {
    // The largest step between E2M1 codes is 2 (4 -> 6), so the error is at most one scale unit.
    const float unit = std::ldexp(1.0f, static_cast<int>(scales[g]) - 127);
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(values[g * 32 + i]));
    EXPECT_LE(amax, 6 * unit);
    EXPECT_GT(amax, 3 * unit);  // the smallest scale that fits
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(decoded[g * 32 + i] - values[g * 32 + i]), unit) << g << " " << i;
    }
  }
}

}  // namespace
}  // namespace xserv::tools
