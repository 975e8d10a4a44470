// Embedding, Add, SiluMul, GeluTanh, GatherRows and LogSoftmax against double references.
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

constexpr int64_t kRowCounts[] = {1, 3, 17, 64};
constexpr int64_t kColCounts[] = {1, 7, 64, 257};

TEST_P(ElementwiseOpTest, EmbeddingCopiesAndAccumulatesRows) {
  std::mt19937 rng(11);
  for (int64_t hidden : {1, 16, 95}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "hidden " << hidden << " accumulate " << accumulate);
      const int64_t vocab = 37;
      // Repeated ids and both ends of the vocabulary.
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 36, 2};
      const int64_t tokens = static_cast<int64_t>(ids.size());
      std::vector<float> table = RandomFloats(vocab * hidden, rng);
      std::vector<float> start = RandomFloats(tokens * hidden, rng);
      Tensor t_table = Upload(table, {vocab, hidden});
      Tensor t_ids = UploadI32(ids, {tokens});
      // Accumulate adds onto existing activations; the plain lookup must overwrite NaN.
      Tensor out = accumulate ? Upload(start, {tokens, hidden}) : Poisoned({tokens, hidden});
      ASSERT_TRUE(backend().Embedding(t_table, t_ids, out, accumulate).ok());
      std::vector<double> expected(tokens * hidden);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < hidden; ++i) {
          const double row = table[ids[t] * hidden + i];
          // Rounded to f32: a correctly rounded sum of two floats equals this exactly.
          expected[t * hidden + i] = accumulate ? static_cast<float>(start[t * hidden + i] + row) : row;
        }
      }
      // A copy is exact, and so is one IEEE addition against the rounded double sum.
      EXPECT_TRUE(AllClose(Download(out), expected, Tol({.f32 = 0, .bf16 = 8e-3})));
    }
  }
}

TEST_P(ElementwiseOpTest, EmbeddingRejectsOutOfRangeIds) {
  std::vector<float> table(4 * 8, 1.0f);
  Tensor t_table = Upload(table, {4, 8});
  for (int32_t bad : {-1, 4, 1 << 30}) {
    Tensor ids = UploadI32({0, bad}, {2});
    const absl::Status status = backend().Embedding(t_table, ids, Poisoned({2, 8}), false);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
  }
}

// A rank's slice of a vocab-parallel table: its ids read their rows, every other id (below or
// above the shard, including ids past any real vocabulary) a zero row.
TEST_P(ElementwiseOpTest, EmbeddingShardReadsItsRowsAndZerosTheRest) {
  std::mt19937 rng(13);
  const int64_t rows = 5, hidden = 24, first = 10;
  std::vector<float> table = RandomFloats(rows * hidden, rng);
  const std::vector<int32_t> ids = {10, 14, 9, 15, 0, 12, 1 << 30, 10};
  const int64_t tokens = static_cast<int64_t>(ids.size());
  Tensor out = Poisoned({tokens, hidden});
  ASSERT_TRUE(backend()
                  .EmbeddingShard(Upload(table, {rows, hidden}), UploadI32(ids, {tokens}), first,
                                  out)
                  .ok());
  std::vector<double> expected(tokens * hidden, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = ids[t] - first;
    if (row < 0 || row >= rows) continue;
    for (int64_t i = 0; i < hidden; ++i) expected[t * hidden + i] = table[row * hidden + i];
  }
  EXPECT_TRUE(AllClose(Download(out), expected, Tol({.f32 = 0, .bf16 = 8e-3})));
  // Negative ids are never valid (nor is a negative first id).
  Tensor bad = UploadI32({10, -1}, {2});
  EXPECT_EQ(backend().EmbeddingShard(Upload(table, {rows, hidden}), bad, first,
                                     Poisoned({2, hidden})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend().EmbeddingShard(Upload(table, {rows, hidden}), UploadI32({1}, {1}), -1,
                                     Poisoned({1, hidden})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ElementwiseOpTest, AddMatchesReferenceAndMayAlias) {
  std::mt19937 rng(12);
  for (int64_t rows : kRowCounts) {
    for (int64_t cols : kColCounts) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
      std::vector<float> a = RandomFloats(rows * cols, rng), b = RandomFloats(rows * cols, rng);
      Tensor ta = Upload(a, {rows, cols}), tb = Upload(b, {rows, cols});
      std::vector<double> expected(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        expected[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
      }
      // IEEE addition is correctly rounded, so f32 must equal the rounded double sum exactly.
      const double tol = Tol({.f32 = 0, .bf16 = 8e-3});
      Tensor out = Poisoned({rows, cols});
      ASSERT_TRUE(backend().Add(ta, tb, out).ok());
      EXPECT_TRUE(AllClose(Download(out), expected, tol));
      ASSERT_TRUE(backend().Add(ta, tb, ta).ok());  // out aliases a
      EXPECT_TRUE(AllClose(Download(ta), expected, tol));
    }
  }
  std::vector<float> a(6, 1.0f), b(8, 1.0f);
  EXPECT_FALSE(backend().Add(Upload(a, {2, 3}), Upload(b, {2, 4}), Poisoned({2, 3})).ok());
}

TEST_P(ElementwiseOpTest, SiluMulOnStridedColumnSlices) {
  std::mt19937 rng(13);
  for (int64_t rows : kRowCounts) {
    for (int64_t inter : kColCounts) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << inter);
      // gate and up are the two halves of one fused [rows, 2 * inter] projection (row stride
      // 2 * inter), as a model's MLP produces them.
      std::vector<float> fused = RandomFloats(rows * 2 * inter, rng, -10.0f, 10.0f);
      Tensor t_fused = Upload(fused, {rows, 2 * inter});
      Tensor gate = t_fused.SliceLast(0, inter), up = t_fused.SliceLast(inter, 2 * inter);
      Tensor out = Poisoned({rows, inter});
      ASSERT_TRUE(backend().SiluMul(gate, up, out).ok());
      std::vector<double> expected(rows * inter);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < inter; ++i) {
          const double g = fused[r * 2 * inter + i], u = fused[r * 2 * inter + inter + i];
          expected[r * inter + i] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      // exp, a division and a product in f32: a few ulp of the result, no cancellation.
      EXPECT_TRUE(AllClose(Download(out), expected, Tol({.f32 = 1e-5, .bf16 = 2e-2}), 1e-30));
    }
  }
}

// The gated MLP's gate_up projection and activation as one op (Backend::MatmulSiluMul), its
// result written over gate_up's gate half as the model does: Matmul then SiluMul, bit for bit.
TEST_P(ElementwiseOpTest, MatmulSiluMulIsMatmulThenSiluMul) {
  std::mt19937 rng(15);
  for (int64_t rows : {int64_t{1}, int64_t{5}}) {
    const int64_t k = 24, inter = 9;
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    std::vector<float> x_host = RandomFloats(rows * k, rng);
    std::vector<float> w_host = RandomFloats(2 * inter * k, rng);
    const Tensor x = Upload(x_host, {rows, k});
    const Tensor w = Upload(w_host, {2 * inter, k});
    const Tensor gate_up = Poisoned({rows, 2 * inter});
    const Tensor act = gate_up.SliceLast(0, inter);
    ASSERT_TRUE(backend().MatmulSiluMul(x, w, gate_up, act).ok());
    const Tensor separate = Poisoned({rows, 2 * inter});
    ASSERT_TRUE(backend().Matmul(x, w, nullptr, separate).ok());
    const Tensor want = Poisoned({rows, inter});
    ASSERT_TRUE(backend()
                    .SiluMul(separate.SliceLast(0, inter), separate.SliceLast(inter, 2 * inter),
                             want)
                    .ok());
    const std::vector<float> got = Download(gate_up), expected = Download(want);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        EXPECT_EQ(got[r * 2 * inter + i], expected[r * inter + i]) << r << "," << i;
      }
    }
  }
  // gate_up must hold two halves.
  std::vector<float> x_host = RandomFloats(8, rng);
  std::vector<float> w_host = RandomFloats(7 * 8, rng);
  const Tensor x = Upload(x_host, {1, 8});
  const Tensor w = Upload(w_host, {7, 8});
  const Tensor odd = Poisoned({1, 7});
  EXPECT_FALSE(backend().MatmulSiluMul(x, w, odd, odd.SliceLast(0, 3)).ok());
}

TEST_P(ElementwiseOpTest, GeluTanhMatchesReferenceInPlace) {
  std::mt19937 rng(14);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t rows : kRowCounts) {
    for (int64_t cols : kColCounts) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
      std::vector<float> x = RandomFloats(rows * cols, rng, -6.0f, 6.0f);
      Tensor tx = Upload(x, {rows, cols});
      std::vector<double> expected(x.size()), scale(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        expected[i] = 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
        // For v << 0, 1 + tanh(z) cancels: its absolute error is about ulp(1) (as in HF's fp32
        // gelu_new), i.e. ~6e-8 * |v| in the output. The |v| / 10 term admits exactly that.
        scale[i] = std::abs(expected[i]) + std::abs(v) / 10;
      }
      Tensor out = Poisoned({rows, cols});
      ASSERT_TRUE(backend().GeluTanh(tx, out).ok());
      const double tol = Tol({.f32 = 1e-5, .bf16 = 2e-2});
      EXPECT_TRUE(AllWithin(Download(out), expected, scale, tol));
      ASSERT_TRUE(backend().GeluTanh(tx, tx).ok());  // out may alias x
      EXPECT_TRUE(AllWithin(Download(tx), expected, scale, tol));
    }
  }
}

TEST_P(ElementwiseOpTest, GatherRowsPicksRowsInOrder) {
  std::mt19937 rng(15);
  for (int64_t cols : {1, 33, 128}) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    const int64_t rows = 9;
    std::vector<float> x = RandomFloats(rows * cols, rng);
    Tensor tx = Upload(x, {rows, cols});
    const std::vector<int32_t> idx = {8, 0, 3, 3, 8, 1};  // repeats, both ends, unsorted
    const int64_t n = static_cast<int64_t>(idx.size());
    Tensor out = Poisoned({n, cols});
    ASSERT_TRUE(backend().GatherRows(tx, UploadI32(idx, {n}), out).ok());
    std::vector<double> expected(n * cols);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < cols; ++c) expected[r * cols + c] = x[idx[r] * cols + c];
    }
    EXPECT_TRUE(AllClose(Download(out), expected, 0.0));  // a copy is exact in any dtype
  }
}

TEST_P(ElementwiseOpTest, GatherRowsRejectsBadIndex) {
  std::vector<float> x(4 * 8, 1.0f);
  Tensor tx = Upload(x, {4, 8});
  for (int32_t bad : {-1, 4}) {
    const absl::Status status =
        backend().GatherRows(tx, UploadI32({0, bad}, {2}), Poisoned({2, 8}));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
  }
  EXPECT_FALSE(backend().GatherRows(tx, UploadI32({0, 1}, {2}), Poisoned({3, 8})).ok());
}

// Double reference of one log-softmax row.
std::vector<double> LogSoftmaxRow(const float* x, int64_t n) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - max - std::log(sum);
  return out;
}

TEST_P(ElementwiseOpTest, LogSoftmaxMatchesReferenceAndNormalises) {
  std::mt19937 rng(16);
  // Offsets: ordinary logits, and logits around +-3e4 where exp(x) alone would overflow.
  for (float offset : {0.0f, 3e4f, -3e4f}) {
    for (int64_t rows : {1, 5}) {
      for (int64_t vocab : {1, 2, 100, 1000}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << vocab << " offset " << offset);
        std::vector<float> x = RandomFloats(rows * vocab, rng, -8.0f, 8.0f);
        for (float& v : x) v += offset;
        Tensor tx = UploadF32(x, {rows, vocab});
        Tensor out = Poisoned({rows, vocab}, /*f32=*/true);
        ASSERT_TRUE(backend().LogSoftmax(tx, out).ok());
        const std::vector<float> got = Download(out);
        std::vector<double> expected, scale;
        double max_abs = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<double> row = LogSoftmaxRow(&x[r * vocab], vocab);
          for (int64_t i = 0; i < vocab; ++i) {
            expected.push_back(row[i]);
            // out = x - log_z in f32: the error is a few ulp of |x| and |log_z|, not of |out|
            // (the largest logit's log-prob can be near 0).
            scale.push_back(std::abs(x[r * vocab + i]) + std::abs(x[r * vocab + i] - row[i]));
            max_abs = std::max(max_abs, std::abs(static_cast<double>(x[r * vocab + i])));
          }
        }
        EXPECT_TRUE(AllWithin(got, expected, scale, 1e-6));
        // In probability space each row sums to 1, up to the same few-ulp error of the logits.
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0;
          for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(got[r * vocab + i]));
          EXPECT_NEAR(sum, 1.0, 1e-5 + 4 * max_abs * std::numeric_limits<float>::epsilon())
              << "row " << r;
        }
        ASSERT_TRUE(backend().LogSoftmax(tx, tx).ok());  // out may alias x
        EXPECT_TRUE(BitIdentical(Download(tx), got));
      }
    }
  }
}

// The host sampler's greedy rule: first maximum (lowest index on ties), NaN skipped, all-NaN -> 0.
int32_t ReferenceArgMax(const float* row, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(row[i])) continue;
    if (best < 0 || row[i] > row[best]) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

TEST_P(ElementwiseOpTest, ArgMaxIsTheFirstMaximumSkippingNaN) {
  std::mt19937 rng(21);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t vocab : {1, 7, 300, 2048, 2049, 151936, 201088}) {
    const int64_t rows = 6;
    std::vector<float> x = RandomFloats(rows * vocab, rng, -4.0f, 4.0f);
    // Row 1: ties at the maximum far apart; row 2: NaN everywhere but one; row 3: all NaN;
    // row 4: -inf everywhere (a fully masked row); row 5: +inf at the end.
    float* r1 = &x[1 * vocab];
    r1[vocab - 1] = 9.0f;
    r1[vocab / 2] = 9.0f;
    for (int64_t i = 0; i < vocab; ++i) x[2 * vocab + i] = nan;
    x[2 * vocab + vocab / 3] = -1.0f;
    for (int64_t i = 0; i < vocab; ++i) x[3 * vocab + i] = nan;
    for (int64_t i = 0; i < vocab; ++i) x[4 * vocab + i] = -inf;
    x[5 * vocab + vocab - 1] = inf;
    Tensor tx = UploadF32(x, {rows, vocab});
    Tensor ids = UploadI32(std::vector<int32_t>(rows, -7), {rows});
    ASSERT_TRUE(backend().ArgMax(tx, ids).ok()) << vocab;
    const std::vector<int32_t> got = DownloadI32(ids);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(got[r], ReferenceArgMax(&x[r * vocab], vocab)) << "vocab " << vocab << " row " << r;
    }
  }
  Tensor bad = UploadI32(std::vector<int32_t>(2, 0), {2});
  EXPECT_EQ(backend().ArgMax(UploadF32(std::vector<float>(3, 0.0f), {3, 1}), bad).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ElementwiseOpTest, ZeroClearsEveryElement) {
  std::mt19937 rng(22);
  Tensor t = UploadF32(RandomFloats(3 * 257, rng), {3, 257});
  ASSERT_TRUE(backend().Zero(t).ok());
  for (float v : Download(t)) ASSERT_EQ(v, 0.0f);
  std::vector<float> values = RandomFloats(4 * 64, rng, 0.5f, 1.0f);  // no zero to start with
  Tensor rows = Upload(values, {4, 64});  // the compute dtype
  ASSERT_TRUE(backend().Zero(rows.SliceRows(1, 3)).ok());
  const std::vector<float> got = Download(rows);
  for (int64_t i = 0; i < 4 * 64; ++i) {
    const bool cleared = i >= 64 && i < 3 * 64;
    if (cleared) {
      ASSERT_EQ(got[i], 0.0f) << i;
    } else {
      ASSERT_NE(got[i], 0.0f) << i;
    }
  }
  EXPECT_FALSE(backend().Zero(t.SliceLast(0, 5)).ok());  // strided
}

TEST_P(ElementwiseOpTest, LogSoftmaxHandlesMaskedAndEqualLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  // Row 0: masked (-inf) entries get -inf and do not disturb the rest; row 1: all equal.
  const std::vector<float> x = {-inf, 2.0f, -inf, 0.0f, 5.0f, 5.0f, 5.0f, 5.0f};
  Tensor out = Poisoned({2, 4}, /*f32=*/true);
  ASSERT_TRUE(backend().LogSoftmax(UploadF32(x, {2, 4}), out).ok());
  const double lz = 2.0 + std::log(1.0 + std::exp(-2.0));
  const std::vector<double> expected = {-inf, 2.0 - lz, -inf, -lz, -std::log(4.0),
                                        -std::log(4.0), -std::log(4.0), -std::log(4.0)};
  EXPECT_TRUE(AllClose(Download(out), expected, 1e-6, 1e-6));
}

}  // namespace
}  // namespace xserv::kernels::testing
