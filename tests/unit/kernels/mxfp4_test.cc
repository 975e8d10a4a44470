// MXFP4 decoding (kernels/mxfp4.h) against the derived gpt-oss test vectors (tests/data/kernels/,
// see SOURCES.md) and against exact arithmetic for every code and every scale byte.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mxfp4.h"
#include "nlohmann/json.hpp"

namespace xserv::kernels {
namespace {

using nlohmann::json;

json LoadVectors() {
  std::ifstream in(std::string(XSERV_TEST_DATA_DIR) + "/kernels/mxfp4_test_vectors.derived.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

// The vectors write negative zero as the string "-0.0".
float JsonFloat(const json& v) { return v.is_string() ? -0.0f : v.get<float>(); }

void Flatten(const json& v, std::vector<json>& out) {
  if (v.is_array()) {
    for (const json& e : v) Flatten(e, out);
  } else {
    out.push_back(v);
  }
}

bool SameFloat(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(Mxfp4Test, Fp4TableMatchesVectors) {
  const json vectors = LoadVectors();
  ASSERT_EQ(vectors["fp4_lut"].size(), 16u);
  for (int code = 0; code < 16; ++code) {
    const float want = JsonFloat(vectors["fp4_lut"][code]);
    EXPECT_TRUE(SameFloat(Fp4E2M1Value(static_cast<uint8_t>(code)), want))
        << "code " << code << ": " << Fp4E2M1Value(static_cast<uint8_t>(code)) << " vs " << want;
  }
  EXPECT_TRUE(std::signbit(Fp4E2M1Value(8)));  // -0.0, not +0.0
  EXPECT_EQ(vectors["scale_bias"].get<int>(), 127);
}

// Case layout: blocks [E, R, G, 16], scales [E, R, G]; expected [E, G * 32, R] (transformers
// transposes to [experts, in, out]). DequantizeMxfp4 keeps the stored [E * R, G * 32] order.
TEST(Mxfp4Test, DequantizeMatchesVectors) {
  const json vectors = LoadVectors();
  ASSERT_GE(vectors["cases"].size(), 2u);
  for (const json& c : vectors["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t experts = c["blocks_shape"][0], rows = c["blocks_shape"][1],
                  groups = c["blocks_shape"][2];
    std::vector<json> blocks_json, scales_json, expected_json;
    Flatten(c["blocks"], blocks_json);
    Flatten(c["scales"], scales_json);
    Flatten(c["expected"], expected_json);
    std::vector<uint8_t> blocks, scales;
    for (const json& b : blocks_json) blocks.push_back(b.get<uint8_t>());
    for (const json& s : scales_json) scales.push_back(s.get<uint8_t>());
    const int64_t cols = groups * 32;
    ASSERT_EQ(expected_json.size(), static_cast<size_t>(experts * rows * cols));
    std::vector<float> out(experts * rows * cols, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(DequantizeMxfp4(blocks, scales, experts * rows, groups, out).ok());
    int mismatches = 0;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t k = 0; k < cols; ++k) {
        for (int64_t r = 0; r < rows; ++r) {
          const float want = JsonFloat(expected_json[(e * cols + k) * rows + r]);
          const float got = out[(e * rows + r) * cols + k];
          if (!SameFloat(got, want) && mismatches++ < 5) {
            ADD_FAILURE() << "expert " << e << " in " << k << " out " << r << ": " << got
                          << " vs " << want;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// Every code under every scale byte, against FP4[code] * 2^(scale - 127) in exact arithmetic.
// Scales 0..254 are all finite or overflow honestly (6 * 2^127 is beyond f32); scale 255 is the
// E8M0 NaN encoding in the OCP MX spec, and like transformers (whose 2^128 overflows to inf
// before the product) the decoder must not produce a finite value for it.
TEST(Mxfp4Test, EveryScaleByte) {
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int scale = 0; scale < 256; ++scale) {
    // One group: bytes 0..7 hold codes (2b, 2b + 1) for b < 8, bytes 8..15 repeat with the
    // nibbles swapped, so each code appears in both nibble positions.
    std::vector<uint8_t> block(16);
    for (int b = 0; b < 8; ++b) {
      block[b] = static_cast<uint8_t>((2 * b) | ((2 * b + 1) << 4));
      block[8 + b] = static_cast<uint8_t>((2 * b + 1) | ((2 * b) << 4));
    }
    const std::vector<uint8_t> scales = {static_cast<uint8_t>(scale)};
    std::vector<float> out(32, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(DequantizeMxfp4(block, scales, 1, 1, out).ok());
    for (int i = 0; i < 32; ++i) {
      const int code = i < 16 ? i : (i % 2 == 0 ? i - 16 + 1 : i - 16 - 1);
      SCOPED_TRACE(::testing::Message() << "scale " << scale << " code " << code);
      if (scale == 255) {
        EXPECT_FALSE(std::isfinite(out[i])) << out[i];
        continue;
      }
      const double exact = std::ldexp(static_cast<double>(kMagnitudes[code & 7]), scale - 127);
      const float want = static_cast<float>((code & 8) ? -exact : exact);
      EXPECT_TRUE(SameFloat(out[i], want)) << out[i] << " vs " << want;
    }
  }
}

// Large tensors are decoded on several threads: the result must equal decoding each row alone
// (one thread), bit for bit, including the rows where the threads' ranges meet.
TEST(Mxfp4Test, ThreadedDecodeEqualsRowByRow) {
  constexpr int64_t kRows = 1031, kGroups = 300;  // > 2^17 groups: the threaded path
  std::vector<uint8_t> blocks(kRows * kGroups * 16), scales(kRows * kGroups);
  uint32_t x = 12345;
  for (uint8_t& b : blocks) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (uint8_t& s : scales) s = static_cast<uint8_t>(100 + ((x = x * 1664525u + 1013904223u) >> 27));
  std::vector<float> whole(kRows * kGroups * 32);
  ASSERT_TRUE(DequantizeMxfp4(blocks, scales, kRows, kGroups, whole).ok());
  std::vector<float> row(kGroups * 32);
  for (int64_t r = 0; r < kRows; ++r) {
    ASSERT_TRUE(DequantizeMxfp4(std::span(blocks).subspan(r * kGroups * 16, kGroups * 16),
                                std::span(scales).subspan(r * kGroups, kGroups), 1, kGroups, row)
                    .ok());
    ASSERT_EQ(std::memcmp(row.data(), whole.data() + r * kGroups * 32, row.size() * sizeof(float)),
              0)
        << "row " << r;
  }
}

TEST(Mxfp4Test, RejectsSizeMismatches) {
  std::vector<uint8_t> blocks(2 * 3 * 16), scales(2 * 3);
  std::vector<float> out(2 * 3 * 32);
  EXPECT_TRUE(DequantizeMxfp4(blocks, scales, 2, 3, out).ok());
  std::vector<uint8_t> short_blocks(2 * 3 * 16 - 1), short_scales(5);
  std::vector<float> short_out(2 * 3 * 32 - 1);
  EXPECT_FALSE(DequantizeMxfp4(short_blocks, scales, 2, 3, out).ok());
  EXPECT_FALSE(DequantizeMxfp4(blocks, short_scales, 2, 3, out).ok());
  EXPECT_FALSE(DequantizeMxfp4(blocks, scales, 2, 3, short_out).ok());
  EXPECT_FALSE(DequantizeMxfp4(blocks, scales, 3, 2, short_out).ok());
  EXPECT_FALSE(DequantizeMxfp4(blocks, scales, -2, -3, out).ok());
}

}  // namespace
}  // namespace xserv::kernels
