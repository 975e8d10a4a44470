// RoPE: the Rope op against a rotate-half reference over tables from BuildRopeTable, and the
// host-side tables (kernels/rope_table.h) against HF's formulas re-derived here in double:
// transformers' _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters and _compute_yarn_parameters.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/rope_table.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

// ---- the Rope op ------------------------------------------------------------------------------

TEST_P(RopeOpTest, RotatesHalvesWithTableValues) {
  std::mt19937 rng(41);
  for (int64_t head_dim : {2, 16, 64, 128}) {
    for (int64_t heads : {1, 3}) {
      for (int64_t tokens : {1, 7}) {
        SCOPED_TRACE(::testing::Message() << tokens << " tokens, " << heads << " heads, dim "
                                          << head_dim);
        constexpr int kMaxPositions = 300;
        const RopeSpec spec{.type = RopeSpec::Type::kYarn, .head_dim = static_cast<int>(head_dim),
                            .theta = 150000.0, .factor = 32.0,
                            .original_max_position_embeddings = 64, .truncate = false};
        auto table = BuildRopeTable(spec, kMaxPositions);
        ASSERT_TRUE(table.ok()) << table.status();
        Tensor t_table = UploadF32(*table, {kMaxPositions, head_dim});
        // Positions: the first, the last and repeats, as in a mixed batch.
        std::vector<int32_t> pos(tokens);
        for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(rng() % kMaxPositions);
        pos[0] = tokens > 1 ? kMaxPositions - 1 : 0;
        if (tokens > 2) pos[2] = pos[1];
        // x is the first third of a fused [tokens, 3 * heads * head_dim] projection: tokens are
        // strided and the rest of each row must stay untouched.
        const int64_t width = heads * head_dim, fused_width = 3 * width;
        std::vector<float> fused = RandomFloats(tokens * fused_width, rng, -2.0f, 2.0f);
        Tensor t_fused = Upload(fused, {tokens, fused_width});
        Tensor x = t_fused.SliceLast(0, width).UnflattenLast(heads, head_dim);
        ASSERT_TRUE(backend().Rope(x, UploadI32(pos, {tokens}), t_table).ok());
        std::vector<double> expected(fused.begin(), fused.end()), scale(fused.size(), 1.0);
        const int64_t half = head_dim / 2;
        for (int64_t t = 0; t < tokens; ++t) {
          const float* cs = table->data() + pos[t] * head_dim;
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t base = t * fused_width + h * head_dim;
            for (int64_t i = 0; i < half; ++i) {
              const double x1 = fused[base + i], x2 = fused[base + half + i];
              const double c = cs[i], s = cs[half + i];
              expected[base + i] = x1 * c - x2 * s;
              expected[base + half + i] = x2 * c + x1 * s;
              scale[base + i] = scale[base + half + i] = std::abs(x1 * c) + std::abs(x2 * s) +
                                                         std::abs(x2 * c) + std::abs(x1 * s);
            }
          }
        }
        // Two products and a sum in f32: <= 1.5 ulp of the magnitudes involved.
        EXPECT_TRUE(AllWithin(Download(t_fused), expected, scale, Tol({.f32 = 1e-6, .bf16 = 1e-2})));
      }
    }
  }
}

TEST_P(RopeOpTest, RejectsPositionOutsideTable) {
  auto table = BuildRopeTable(RopeSpec{.head_dim = 8}, 4);
  ASSERT_TRUE(table.ok());
  Tensor t_table = UploadF32(*table, {4, 8});
  std::vector<float> x(2 * 8, 1.0f);
  Tensor tx = Upload(x, {2, 8}).UnflattenLast(1, 8);
  for (int32_t bad : {-1, 4}) {
    const absl::Status status = backend().Rope(tx, UploadI32({0, bad}, {2}), t_table);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
  }
  EXPECT_FALSE(backend().Rope(tx, UploadI32({0}, {1}), t_table).ok());  // one position short
}

// ---- tables (host) ----------------------------------------------------------------------------

// HF computes inverse frequencies in fp32: the exponent 2i/d is rounded (<= 0.5 ulp) and then
// amplified by ln(theta) * 2i/d (<= ~13.1 for theta 5e5) in theta^(2i/d), plus the roundings of
// pow and 1/x: < 1e-6 relative to the exact value computed here in double.
constexpr double kInvFreqTol = 2e-6;

std::vector<double> DefaultInvFreq(int head_dim, double theta) {
  std::vector<double> inv(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv[i] = 1.0 / std::pow(theta, 2.0 * i / head_dim);
  return inv;
}

::testing::AssertionResult InvFreqMatches(const RopeSpec& spec, const std::vector<double>& want) {
  auto got = RopeInverseFrequencies(spec);
  if (!got.ok()) return ::testing::AssertionFailure() << got.status();
  return AllClose(*got, want, kInvFreqTol);
}

TEST(RopeTableTest, DefaultInverseFrequencies) {
  // By hand: theta^(-2i/d).
  EXPECT_TRUE(InvFreqMatches({.head_dim = 4, .theta = 10000.0}, {1.0, 0.01}));
  EXPECT_TRUE(InvFreqMatches({.head_dim = 8, .theta = 10000.0}, {1.0, 0.1, 0.01, 0.001}));
  for (int head_dim : {2, 64, 128}) {
    for (double theta : {10000.0, 150000.0, 500000.0, 1000000.0}) {
      SCOPED_TRACE(::testing::Message() << "dim " << head_dim << " theta " << theta);
      EXPECT_TRUE(InvFreqMatches({.head_dim = head_dim, .theta = theta},
                                 DefaultInvFreq(head_dim, theta)));
    }
  }
}

TEST(RopeTableTest, LinearScalingDividesEveryFrequency) {
  std::vector<double> want = DefaultInvFreq(64, 10000.0);
  for (double& f : want) f /= 4.0;
  EXPECT_TRUE(InvFreqMatches(
      {.type = RopeSpec::Type::kLinear, .head_dim = 64, .theta = 10000.0, .factor = 4.0}, want));
}

// HF _compute_llama3_parameters: wavelengths above old_context / low_freq_factor are divided by
// factor, below old_context / high_freq_factor kept, and blended in between with
// smooth = (old_context / wavelen - low) / (high - low).
std::vector<double> Llama3InvFreq(const RopeSpec& s, int* num_low, int* num_mid, int* num_high) {
  std::vector<double> inv = DefaultInvFreq(s.head_dim, s.theta);
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    // The reference is in double, the op in fp32: a frequency this close to a band edge could
    // legitimately land in either band, so the chosen configurations must avoid it.
    EXPECT_GT(std::abs(wavelen / low_wavelen - 1), 1e-4);
    EXPECT_GT(std::abs(wavelen / high_wavelen - 1), 1e-4);
    if (wavelen > low_wavelen) {
      f /= s.factor;
      ++*num_low;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
      ++*num_mid;
    } else {
      ++*num_high;
    }
  }
  return inv;
}

TEST(RopeTableTest, Llama3ScalingBlendsBands) {
  // Llama 3.1 8B and Llama 3.2 1B rope_scaling.
  const RopeSpec specs[] = {
      {.type = RopeSpec::Type::kLlama3, .head_dim = 128, .theta = 500000.0, .factor = 8.0,
       .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position_embeddings = 8192},
      {.type = RopeSpec::Type::kLlama3, .head_dim = 64, .theta = 500000.0, .factor = 32.0,
       .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position_embeddings = 8192},
  };
  for (const RopeSpec& spec : specs) {
    SCOPED_TRACE(::testing::Message() << "dim " << spec.head_dim << " factor " << spec.factor);
    int low = 0, mid = 0, high = 0;
    const std::vector<double> want = Llama3InvFreq(spec, &low, &mid, &high);
    EXPECT_TRUE(low > 0 && mid > 0 && high > 0) << low << " " << mid << " " << high;
    EXPECT_TRUE(InvFreqMatches(spec, want));
  }
}

// HF _compute_yarn_parameters: correction dims from beta_fast / beta_slow, optionally
// floor/ceil, clamped to [0, dim - 1]; ramp over i in [0, dim / 2); inv = interp * ramp +
// extrap * (1 - ramp) with interp = extrap / factor.
std::vector<double> YarnInvFreq(const RopeSpec& s, int* num_blended) {
  auto correction_dim = [&](double rotations) {
    return s.head_dim *
           std::log(s.original_max_position_embeddings / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(s.theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, s.head_dim - 1.0);
  if (low == high) high += 0.001;
  std::vector<double> inv = DefaultInvFreq(s.head_dim, s.theta);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    if (ramp > 0 && ramp < 1) ++*num_blended;
    inv[i] = inv[i] / s.factor * ramp + inv[i] * (1 - ramp);
  }
  return inv;
}

TEST(RopeTableTest, YarnScalingRampsBetweenCorrectionDims) {
  const RopeSpec specs[] = {
      // gpt-oss-20b: no truncation, the ramp runs over fractional dims 8.09 .. 17.4.
      {.type = RopeSpec::Type::kYarn, .head_dim = 64, .theta = 150000.0, .factor = 32.0,
       .original_max_position_embeddings = 4096, .beta_fast = 32.0, .beta_slow = 1.0,
       .truncate = false},
      // Qwen-style YaRN with HF's default truncation.
      {.type = RopeSpec::Type::kYarn, .head_dim = 128, .theta = 1000000.0, .factor = 4.0,
       .original_max_position_embeddings = 32768, .beta_fast = 32.0, .beta_slow = 1.0,
       .truncate = true},
  };
  for (const RopeSpec& spec : specs) {
    SCOPED_TRACE(::testing::Message() << "dim " << spec.head_dim << " truncate " << spec.truncate);
    int blended = 0;
    const std::vector<double> want = YarnInvFreq(spec, &blended);
    EXPECT_GT(blended, 2);  // the ramp is exercised, not only its flat ends
    EXPECT_TRUE(InvFreqMatches(spec, want));
  }
}

TEST(RopeTableTest, YarnAttentionFactor) {
  RopeSpec yarn{.type = RopeSpec::Type::kYarn, .head_dim = 64, .theta = 150000.0, .factor = 32.0,
                .original_max_position_embeddings = 4096};
  EXPECT_NEAR(RopeAttentionFactor(yarn), 0.1 * std::log(32.0) + 1.0, 1e-12);  // 1.34657...
  yarn.factor = 4.0;
  EXPECT_NEAR(RopeAttentionFactor(yarn), 0.1 * std::log(4.0) + 1.0, 1e-12);
  yarn.factor = 1.0;  // HF's get_mscale: no boost without scaling
  EXPECT_EQ(RopeAttentionFactor(yarn), 1.0);
  yarn.attention_factor = 0.75;  // an explicit attention_factor wins
  EXPECT_EQ(RopeAttentionFactor(yarn), 0.75);
  EXPECT_EQ(RopeAttentionFactor({.type = RopeSpec::Type::kLinear, .head_dim = 8, .factor = 4.0}),
            1.0);
  EXPECT_EQ(RopeAttentionFactor({.type = RopeSpec::Type::kLlama3, .head_dim = 8, .factor = 8.0}),
            1.0);
}

TEST(RopeTableTest, TableRowsAreScaledCosAndSin) {
  const RopeSpec spec{.type = RopeSpec::Type::kYarn, .head_dim = 16, .theta = 150000.0,
                      .factor = 32.0, .original_max_position_embeddings = 4096,
                      .truncate = false};
  constexpr int kPositions = 5000;
  auto table = BuildRopeTable(spec, kPositions);
  auto inv = RopeInverseFrequencies(spec);
  ASSERT_TRUE(table.ok() && inv.ok());
  ASSERT_EQ(table->size(), static_cast<size_t>(kPositions) * 16);
  const double af = 0.1 * std::log(32.0) + 1.0;
  std::vector<double> expected(table->size());
  for (int p = 0; p < kPositions; ++p) {
    for (int i = 0; i < 8; ++i) {
      // HF forms the angle as an fp32 product of position and inverse frequency.
      const double angle = static_cast<float>(p) * (*inv)[i];
      const double angle_f32 = static_cast<float>(angle);
      expected[p * 16 + i] = std::cos(angle_f32) * af;
      expected[p * 16 + 8 + i] = std::sin(angle_f32) * af;
    }
  }
  // cos/sin of the same fp32 angle, rounded twice (value and af product).
  std::vector<double> scale(expected.size(), af);
  EXPECT_TRUE(AllWithin(*table, expected, scale, 3e-7));
}

TEST(RopeTableTest, RejectsInvalidSpecs) {
  using Type = RopeSpec::Type;
  const RopeSpec bad[] = {
      {.head_dim = 0},
      {.head_dim = -2},
      {.head_dim = 7},
      {.head_dim = 8, .theta = 0.0},
      {.head_dim = 8, .theta = -10000.0},
      {.type = Type::kLinear, .head_dim = 8, .factor = 0.0},
      {.type = Type::kLlama3, .head_dim = 8, .factor = 8.0},  // no original context
      {.type = Type::kLlama3, .head_dim = 8, .factor = 0.0, .original_max_position_embeddings = 8192},
      {.type = Type::kLlama3, .head_dim = 8, .factor = 8.0, .low_freq_factor = 4.0,
       .high_freq_factor = 4.0, .original_max_position_embeddings = 8192},
      {.type = Type::kYarn, .head_dim = 8, .factor = 32.0},  // no original context
      {.type = Type::kYarn, .head_dim = 8, .factor = -1.0, .original_max_position_embeddings = 4096},
  };
  for (size_t i = 0; i < std::size(bad); ++i) {
    const auto inv = RopeInverseFrequencies(bad[i]);
    EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument) << "spec " << i;
    EXPECT_FALSE(BuildRopeTable(bad[i], 16).ok()) << "spec " << i;
  }
  EXPECT_FALSE(BuildRopeTable(RopeSpec{.head_dim = 8}, 0).ok());
}

}  // namespace
}  // namespace xserv::kernels::testing
