// RmsNorm, AddRmsNorm and LayerNorm against double references.
//
// f32 bound 1e-5 relative: the CPU reduces in double, then applies 2-3 f32 roundings (inverse,
// product, weight), a few ulp (~2e-7); 1e-5 leaves room for an f32-accumulating device kernel over
// up to a few thousand features.
#include <cmath>
#include <random>
#include <vector>

#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

constexpr Tolerance kNormTol{.f32 = 1e-5, .bf16 = 2e-2};
constexpr int64_t kRowCounts[] = {1, 2, 17, 40};
constexpr int64_t kHiddenSizes[] = {1, 8, 100, 2880, 4096};

std::vector<double> RmsNormRef(const std::vector<float>& x, const std::vector<float>& w,
                               int64_t hidden, double eps) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r * hidden < x.size(); ++r) {
    double sum_sq = 0;
    for (int64_t i = 0; i < hidden; ++i) sum_sq += static_cast<double>(x[r * hidden + i]) * x[r * hidden + i];
    const double inv = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) out[r * hidden + i] = x[r * hidden + i] * inv * w[i];
  }
  return out;
}

TEST_P(NormOpTest, RmsNormMatchesReference) {
  std::mt19937 rng(21);
  for (int64_t rows : kRowCounts) {
    for (int64_t hidden : kHiddenSizes) {
      for (float eps : {1e-6f, 1e-5f}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << hidden << " eps " << eps);
        // A per-row magnitude so eps matters for some rows and not for others.
        std::vector<float> x = RandomFloats(rows * hidden, rng, -2.0f, 2.0f);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < hidden; ++i) x[r * hidden + i] *= std::pow(10.0f, r % 5 - 3);
        }
        std::vector<float> w = RandomFloats(hidden, rng, 0.5f, 1.5f);
        Tensor tx = Upload(x, {rows, hidden}), tw = Upload(w, {hidden});
        Tensor out = Poisoned({rows, hidden});
        ASSERT_TRUE(backend().RmsNorm(tx, tw, eps, out).ok());
        const std::vector<double> expected = RmsNormRef(x, w, hidden, eps);
        EXPECT_TRUE(AllClose(Download(out), expected, Tol(kNormTol)));
        ASSERT_TRUE(backend().RmsNorm(tx, tw, eps, tx).ok());  // out may alias x
        EXPECT_TRUE(AllClose(Download(tx), expected, Tol(kNormTol)));
      }
    }
  }
}

// Qwen3's q/k norms: x [tokens, heads, head_dim] normalised per head with one head_dim weight, in
// place (the model's q and k workspaces are contiguous).
TEST_P(NormOpTest, RmsNormPerHeadRank3InPlace) {
  std::mt19937 rng(22);
  for (int64_t tokens : {1, 5, 33}) {
    for (int64_t heads : {1, 4}) {
      for (int64_t head_dim : {16, 128}) {
        SCOPED_TRACE(::testing::Message() << tokens << "x" << heads << "x" << head_dim);
        std::vector<float> x = RandomFloats(tokens * heads * head_dim, rng);
        std::vector<float> w = RandomFloats(head_dim, rng, 0.5f, 1.5f);
        Tensor tx = Upload(x, {tokens, heads * head_dim}).UnflattenLast(heads, head_dim);
        ASSERT_TRUE(backend().RmsNorm(tx, Upload(w, {head_dim}), 1e-6f, tx).ok());
        EXPECT_TRUE(AllClose(Download(tx), RmsNormRef(x, w, head_dim, 1e-6), Tol(kNormTol)));
      }
    }
  }
}

TEST_P(NormOpTest, AddRmsNormUpdatesResidual) {
  std::mt19937 rng(23);
  for (int64_t rows : kRowCounts) {
    for (int64_t hidden : kHiddenSizes) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << hidden);
      std::vector<float> x = RandomFloats(rows * hidden, rng);
      std::vector<float> res = RandomFloats(rows * hidden, rng, -3.0f, 3.0f);
      std::vector<float> w = RandomFloats(hidden, rng, 0.5f, 1.5f);
      Tensor tx = Upload(x, {rows, hidden}), tr = Upload(res, {rows, hidden});
      Tensor tw = Upload(w, {hidden});
      Tensor out = Poisoned({rows, hidden});
      ASSERT_TRUE(backend().AddRmsNorm(tx, tr, tw, 1e-5f, out).ok());
      // The residual stream is stored: the sum rounded once to the compute dtype.
      std::vector<float> sum(x.size());
      std::vector<double> sum_ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        sum[i] = static_cast<float>(static_cast<double>(x[i]) + res[i]);
        sum_ref[i] = sum[i];
      }
      const std::vector<float> new_res = Download(tr);
      EXPECT_TRUE(AllClose(new_res, sum_ref, Tol({.f32 = 0, .bf16 = 8e-3})));
      // The norm is of the stored residual (what the next layer adds onto).
      EXPECT_TRUE(AllClose(Download(out), RmsNormRef(new_res, w, hidden, 1e-5), Tol(kNormTol)));
      EXPECT_TRUE(AllClose(Download(tx), std::vector<double>(x.begin(), x.end()), 0.0));
    }
  }
}

TEST_P(NormOpTest, LayerNormMatchesReference) {
  std::mt19937 rng(24);
  for (int64_t rows : kRowCounts) {
    for (int64_t hidden : kHiddenSizes) {
      for (float mean : {0.0f, 20.0f}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << hidden << " mean " << mean);
        std::vector<float> x = RandomFloats(rows * hidden, rng, mean - 1.0f, mean + 1.0f);
        std::vector<float> w = RandomFloats(hidden, rng, 0.5f, 1.5f);
        std::vector<float> b = RandomFloats(hidden, rng);
        Tensor tx = Upload(x, {rows, hidden}), tw = Upload(w, {hidden}), tb = Upload(b, {hidden});
        Tensor out = Poisoned({rows, hidden});
        const float eps = 1e-5f;
        ASSERT_TRUE(backend().LayerNorm(tx, tw, tb, eps, out).ok());
        std::vector<double> expected(x.size()), scale(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = &x[r * hidden];
          double m = 0, var = 0;
          for (int64_t i = 0; i < hidden; ++i) m += xr[i];
          m /= hidden;
          for (int64_t i = 0; i < hidden; ++i) var += (xr[i] - m) * (xr[i] - m);
          const double inv = 1.0 / std::sqrt(var / hidden + eps);
          for (int64_t i = 0; i < hidden; ++i) {
            expected[r * hidden + i] = (xr[i] - m) * inv * w[i] + b[i];
            // x - mean cancels when the mean is large against the spread: f32 can only be
            // accurate relative to |x|, which the first term carries.
            scale[r * hidden + i] = (std::abs(xr[i]) * inv + 1.0) * std::abs(w[i]) + std::abs(b[i]);
          }
        }
        EXPECT_TRUE(AllWithin(Download(out), expected, scale, Tol(kNormTol)));
        ASSERT_TRUE(backend().LayerNorm(tx, tw, tb, eps, tx).ok());  // out may alias x
        EXPECT_TRUE(AllWithin(Download(tx), expected, scale, Tol(kNormTol)));
      }
    }
  }
}

TEST_P(NormOpTest, RejectsMismatchedWeight) {
  std::vector<float> x(2 * 8, 1.0f), w(7, 1.0f), b(8, 0.0f);
  Tensor tx = Upload(x, {2, 8}), tw = Upload(w, {7}), tb = Upload(b, {8});
  EXPECT_FALSE(backend().RmsNorm(tx, tw, 1e-5f, Poisoned({2, 8})).ok());
  EXPECT_FALSE(backend().AddRmsNorm(tx, tx, tw, 1e-5f, Poisoned({2, 8})).ok());
  EXPECT_FALSE(backend().LayerNorm(tx, tw, tb, 1e-5f, Poisoned({2, 8})).ok());
  EXPECT_FALSE(backend().RmsNorm(tx, tb, 1e-5f, Poisoned({2, 7})).ok());
}

}  // namespace
}  // namespace xserv::kernels::testing
