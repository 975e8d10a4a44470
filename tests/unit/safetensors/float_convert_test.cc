#include "common/safetensors/float_convert.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace xserv::safetensors {
namespace {

TEST(FloatConvertTest, Bf16KnownPatterns) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(Bf16ToFloat(0x4049), 3.140625f);
  EXPECT_EQ(Bf16ToFloat(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
  EXPECT_EQ(Bf16ToFloat(0x7F7F), 3.3895313892515355e38f);  // largest finite
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0x7F80)));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7FC0)));
  EXPECT_TRUE(std::signbit(Bf16ToFloat(0x8000)));
}

TEST(FloatConvertTest, F16KnownPatterns) {
  EXPECT_EQ(F16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(F16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(F16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToFloat(0x0400), std::ldexp(1.0f, -14));         // smallest normal
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(F16ToFloat(0x03FF), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(F16ToFloat(0xFC00)) && F16ToFloat(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(F16ToFloat(0x7E00)));
}

TEST(FloatConvertTest, F8E4M3FnKnownPatterns) {
  EXPECT_EQ(F8E4M3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(F8E4M3ToFloat(0x80)));
  EXPECT_EQ(F8E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x3C), 1.5f);
  EXPECT_EQ(F8E4M3ToFloat(0x40), 2.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x01), 0.001953125f);  // 2^-9, smallest subnormal
  EXPECT_EQ(F8E4M3ToFloat(0x07), 0.013671875f);  // 7 * 2^-9, largest subnormal
  EXPECT_EQ(F8E4M3ToFloat(0x08), 0.015625f);     // 2^-6, smallest normal
  EXPECT_EQ(F8E4M3ToFloat(0x77), 240.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x78), 256.0f);  // exponent 15 is finite in the fn variant
  EXPECT_EQ(F8E4M3ToFloat(0x7E), 448.0f);  // max
  EXPECT_EQ(F8E4M3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(F8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(F8E4M3ToFloat(0xFF)));
  // No infinities anywhere in the table.
  for (int code = 0; code < 256; ++code) {
    EXPECT_FALSE(std::isinf(F8E4M3ToFloat(static_cast<uint8_t>(code)))) << code;
  }
}

TEST(FloatConvertTest, F8E5M2KnownPatterns) {
  EXPECT_EQ(F8E5M2ToFloat(0x3C), 1.0f);
  EXPECT_EQ(F8E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(F8E5M2ToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(F8E5M2ToFloat(0x7C)));
  EXPECT_TRUE(std::isnan(F8E5M2ToFloat(0x7D)));
}

TEST(FloatConvertTest, EncodersInvertDecodersOnEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float bf = Bf16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(bf)) {
      EXPECT_EQ(FloatToBf16(bf), bits) << std::hex << bits;
    }
    const float h = F16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(h)) {
      EXPECT_EQ(FloatToF16(h), bits) << std::hex << bits;
    }
  }
  for (uint32_t bits = 0; bits < 0x100; ++bits) {
    const float f8 = F8E4M3ToFloat(static_cast<uint8_t>(bits));
    if (!std::isnan(f8)) {
      EXPECT_EQ(FloatToF8E4M3Saturating(f8), bits) << std::hex << bits;
    }
  }
}

TEST(FloatConvertTest, EncodersRoundToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 1.0 (even) and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  // f16: 1 + 2^-11 is halfway between 1.0 and 1 + 2^-10.
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7C00);               // ties to even -> infinity
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal -> 0
  EXPECT_EQ(FloatToF16(std::ldexp(3.0f, -26)), 0x0001);
  // e4m3: 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39).
  EXPECT_EQ(FloatToF8E4M3Saturating(1.0625f), 0x38);
  EXPECT_EQ(FloatToF8E4M3Saturating(1.1875f), 0x3A);
  EXPECT_EQ(FloatToF8E4M3Saturating(1000.0f), 0x7E);
  EXPECT_EQ(FloatToF8E4M3Saturating(-1000.0f), 0xFE);
  EXPECT_EQ(FloatToF8E4M3Saturating(NAN), 0x7F);
}

// The E4M3 encoder against a brute-force nearest-code search (ties to the even code) at every
// code, every midpoint between neighbours, one ulp either side of it, and both signs: the
// subnormal range, binade edges and the saturation at 448 included.
TEST(FloatConvertTest, E4M3EncoderIsTheNearestCodeTiesToEven) {
  const auto nearest = [](float value) {
    const float magnitude = std::fabs(value);
    uint8_t best = 0;
    float best_err = magnitude;
    for (uint8_t code = 1; code < 0x7F; ++code) {
      const float err = std::fabs(F8E4M3ToFloat(code) - magnitude);
      if (err < best_err || (err == best_err && (code & 1u) == 0)) best = code, best_err = err;
    }
    return static_cast<uint8_t>((std::signbit(value) ? 0x80 : 0) | best);
  };
  for (int c = 0; c < 0x7E; ++c) {
    const float v = F8E4M3ToFloat(static_cast<uint8_t>(c));
    const float mid = (v + F8E4M3ToFloat(static_cast<uint8_t>(c + 1))) / 2;
    for (const float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      EXPECT_EQ(FloatToF8E4M3Saturating(x), nearest(x)) << x;
      EXPECT_EQ(FloatToF8E4M3Saturating(-x), nearest(-x)) << -x;
    }
  }
  for (const float x : {447.9f, 448.0f, 460.0f, 1e-10f, 0.0f, -0.0f}) {
    EXPECT_EQ(FloatToF8E4M3Saturating(x), x >= 448.0f ? 0x7E : nearest(x)) << x;
  }
}

TEST(FloatConvertTest, ConvertToFloatHandlesUnalignedInput) {
  const uint16_t values[3] = {0x3F80, 0xC000, 0x4049};
  std::vector<std::byte> buffer(1 + sizeof(values));
  std::memcpy(buffer.data() + 1, values, sizeof(values));
  std::vector<float> out(3);
  ASSERT_TRUE(ConvertToFloat(DType::kBF16, std::span(buffer).subspan(1), out).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 3.140625f}));

  const uint8_t f8[2] = {0x38, 0x7E};
  std::vector<float> out8(2);
  ASSERT_TRUE(ConvertToFloat(DType::kF8E4M3, std::as_bytes(std::span(f8)), out8).ok());
  EXPECT_EQ(out8, (std::vector<float>{1.0f, 448.0f}));

  EXPECT_FALSE(ConvertToFloat(DType::kBF16, std::span(buffer).subspan(1), out8).ok());
  EXPECT_FALSE(ConvertToFloat(DType::kI32, {}, {}).ok());
}

}  // namespace
}  // namespace xserv::safetensors
