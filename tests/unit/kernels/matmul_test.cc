// Matmul against a double reference, and batch invariance: a row's result must not depend on which
// other rows share its batch (the engine promises that batching never changes greedy tokens).
#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/fp8.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

// f32 bound 1e-5 relative to sum_k |x_k w_k| + |b|: the classic dot-product error bound with
// blocked accumulation is ~sqrt(K) ulp of that sum (< 1e-6 for K <= 4096); the margin covers
// device kernels that split K.
constexpr Tolerance kMatmulTol{.f32 = 1e-5, .bf16 = 1e-2};

// out[i, j] = sum_p x[i, x_pad + p] * w[j, p] (+ b[j]) in double, with sum_p |x w| (+ |b|) as the
// scale the tolerance is relative to; x rows are `ld` apart.
struct Reference {
  std::vector<double> expected, scale;
};
Reference DoubleReference(const std::vector<float>& x, int64_t ld, int64_t x_pad,
                          const std::vector<float>& w, const std::vector<float>* b, int64_t m,
                          int64_t n, int64_t k) {
  Reference ref{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(x[i * ld + x_pad + p]) * w[j * k + p];
        dot += prod;
        mag += std::abs(prod);
      }
      ref.expected[i * n + j] = dot + (b != nullptr ? (*b)[j] : 0.0);
      ref.scale[i * n + j] = mag + (b != nullptr ? std::abs((*b)[j]) : 0.0);
    }
  }
  return ref;
}

struct MatmulCase {
  int64_t m, k, n;
  bool bias;
  int64_t x_pad;  // extra columns after each x row: x is a strided view when > 0
};

TEST_P(MatmulOpTest, MatchesReference) {
  std::vector<MatmulCase> cases;
  for (int64_t m : {1, 2, 5, 33}) {
    for (int64_t k : {1, 7, 64, 129}) {
      for (int64_t n : {1, 3, 64, 257}) {
        cases.push_back({m, k, n, (m + k + n) % 2 == 0, 0});
      }
    }
  }
  cases.push_back({1, 2880, 201, true, 5});  // a decode step against a wide projection
  cases.push_back({17, 96, 40, false, 32});  // strided rows: a column slice of a fused output
  cases.push_back({17, 96, 40, true, 1});
  // Decode shapes with 16-byte aligned rows (the CUDA backend's skinny GEMV path), strided too.
  cases.push_back({3, 1024, 300, true, 8});
  cases.push_back({8, 4096, 160, false, 0});
  cases.push_back({1, 12288, 96, false, 0});
  std::mt19937 rng(31);
  for (const MatmulCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "M=" << c.m << " K=" << c.k << " N=" << c.n << " bias="
                                      << c.bias << " x_pad=" << c.x_pad);
    const int64_t ld = c.k + c.x_pad;
    std::vector<float> x = RandomFloats(c.m * ld, rng);
    std::vector<float> w = RandomFloats(c.n * c.k, rng);
    std::vector<float> b = RandomFloats(c.n, rng);
    Tensor tx = Upload(x, {c.m, ld}).SliceLast(c.x_pad, ld);  // the last K columns
    Tensor tw = Upload(w, {c.n, c.k}), tb = Upload(b, {c.n});
    Tensor out = Poisoned({c.m, c.n});
    const absl::Status status = backend().Matmul(tx, tw, c.bias ? &tb : nullptr, out);
    if (status.code() == absl::StatusCode::kUnimplemented && GetParam().may_refuse_tiny_matmuls &&
        (c.n < 8 || c.k < 8)) {
      continue;
    }
    ASSERT_TRUE(status.ok()) << status;
    const Reference ref = DoubleReference(x, ld, c.x_pad, w, c.bias ? &b : nullptr, c.m, c.n, c.k);
    EXPECT_TRUE(AllWithin(Download(out), ref.expected, ref.scale, Tol(kMatmulTol)));
  }
}

TEST_P(MatmulOpTest, RejectsMismatchedShapes) {
  std::vector<float> x(2 * 8, 1.0f), w(3 * 7, 1.0f), w_ok(3 * 8, 1.0f), b(4, 0.0f);
  Tensor tx = Upload(x, {2, 8}), tw = Upload(w, {3, 7}), tw_ok = Upload(w_ok, {3, 8});
  Tensor tb = Upload(b, {4});
  EXPECT_FALSE(backend().Matmul(tx, tw, nullptr, Poisoned({2, 3})).ok());     // K differs
  EXPECT_FALSE(backend().Matmul(tx, tw_ok, nullptr, Poisoned({2, 4})).ok());  // N differs
  EXPECT_FALSE(backend().Matmul(tx, tw_ok, nullptr, Poisoned({3, 3})).ok());  // M differs
  EXPECT_FALSE(backend().Matmul(tx, tw_ok, &tb, Poisoned({2, 3})).ok());      // bias size
}

// W8A16: FP8 block-scaled weights (kernels/fp8.h layout) against a double reference over the
// exactly decoded weights. Decode rows (the CUDA skinny-GEMV path), prefill rows (decoded to bf16
// scratch, then the GEMM), blocks cut by N and K, K not a multiple of 16 (no GEMV), strided x.
TEST_P(MatmulOpTest, Fp8WeightsMatchTheirDecodedReference) {
  struct Fp8Case {
    int64_t m, k, n, block;
    bool bias;
    int64_t x_pad;
  };
  const Fp8Case cases[] = {{1, 320, 200, 128, true, 0},  {3, 256, 130, 128, false, 8},
                           {8, 4096, 96, 128, true, 0},  {17, 320, 200, 128, true, 0},
                           {2, 72, 40, 32, false, 0},    {5, 64, 48, 16, true, 0},
                           {40, 1024, 256, 128, false, 0}};
  std::mt19937 rng(33);
  for (const Fp8Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "M=" << c.m << " K=" << c.k << " N=" << c.n
                                      << " block=" << c.block << " bias=" << c.bias);
    const int64_t ld = c.k + c.x_pad;
    std::vector<float> x = RandomFloats(c.m * ld, rng);
    std::vector<float> w = RandomFloats(c.n * c.k, rng);
    std::vector<float> b = RandomFloats(c.n, rng);
    const Fp8Blocks q = QuantizeFp8Blocks(w, c.n, c.k, c.block);
    std::vector<float> decoded(static_cast<size_t>(c.n * c.k));
    DequantizeFp8Blocks(q, c.n, c.k, c.block, decoded);
    Fp8Weight weight{.codes = Alloc(DType::kU8, {c.n, c.k}),
                     .scales = UploadF32(q.scale_inv, {(c.n + c.block - 1) / c.block,
                                                       (c.k + c.block - 1) / c.block}),
                     .block = c.block};
    ASSERT_TRUE(backend().CopyFromHost(q.codes.data(), weight.codes).ok());
    Tensor tx = Upload(x, {c.m, ld}).SliceLast(c.x_pad, ld);
    Tensor tb = Upload(b, {c.n});
    Tensor out = Poisoned({c.m, c.n});
    const absl::Status status = backend().MatmulFp8(tx, weight, c.bias ? &tb : nullptr, out);
    ASSERT_TRUE(status.ok()) << status;
    const Reference ref =
        DoubleReference(x, ld, c.x_pad, decoded, c.bias ? &b : nullptr, c.m, c.n, c.k);
    EXPECT_TRUE(AllWithin(Download(out), ref.expected, ref.scale, Tol(kMatmulTol)));
  }
}

TEST_P(MatmulOpTest, Fp8RejectsMisshapenWeights) {
  std::vector<float> x(2 * 64, 1.0f);
  Tensor tx = Upload(x, {2, 64});
  const Tensor codes = Alloc(DType::kU8, {48, 64});
  const Tensor scales = UploadF32(std::vector<float>(3 * 4, 1.0f), {3, 4});  // block 16
  EXPECT_TRUE(backend().MatmulFp8(tx, {codes, scales, 16}, nullptr, Poisoned({2, 48})).ok());
  EXPECT_FALSE(backend().MatmulFp8(tx, {codes, scales, 32}, nullptr, Poisoned({2, 48})).ok());
  EXPECT_FALSE(backend().MatmulFp8(tx, {codes, scales, 0}, nullptr, Poisoned({2, 48})).ok());
  const Tensor narrow = Alloc(DType::kU8, {48, 48});
  EXPECT_FALSE(backend().MatmulFp8(tx, {narrow, scales, 16}, nullptr, Poisoned({2, 48})).ok());
  EXPECT_FALSE(backend().MatmulFp8(tx, {codes, scales, 16}, nullptr, Poisoned({2, 40})).ok());
}

// Batch invariance. For random x [128, K]: every row of every sub-batch x[offset, offset + M)
// (M in kBatchSizes, several offsets so a row sits at different positions inside the GEMM's
// tiles), and every row computed alone, must be bit-identical to the same row of the full batch.
constexpr int64_t kBatchSizes[] = {1, 2, 3, 7, 16, 37, 64, 128};

struct ProjectionShape {
  int64_t k, n;
};

TEST_P(MatmulOpTest, BatchInvariance) {
  if (!GetParam().batch_invariant) GTEST_SKIP() << "backend not in a batch-invariant mode";
  constexpr int64_t kRows = 128;
  // Shapes of real projections, scaled down: square, wide (MLP up), narrow (k/v, router), and
  // gpt-oss's hidden 2880. OpenBLAS (0.3.21, DYNAMIC_ARCH) sends GEMMs with M * N * K below ~1e6
  // to separate "small matrix" kernels with another summation order, so the small shapes compare
  // rows across that cutoff; {2880, 512} stays above it even at M = 1.
  const ProjectionShape shapes[] = {{64, 64},   {256, 96},    {384, 1024},
                                    {1024, 384}, {2880, 32},  {2880, 512}};
  std::mt19937 rng(32);
  std::ostringstream broken;
  int broken_count = 0;
  for (const ProjectionShape& s : shapes) {
    std::vector<float> x = RandomFloats(kRows * s.k, rng);
    std::vector<float> w = RandomFloats(s.n * s.k, rng);
    std::vector<float> b = RandomFloats(s.n, rng);
    Tensor tx = Upload(x, {kRows, s.k}), tw = Upload(w, {s.n, s.k}), tb = Upload(b, {s.n});
    for (bool bias : {false, true}) {
      Tensor full = Poisoned({kRows, s.n});
      ASSERT_TRUE(backend().Matmul(tx, tw, bias ? &tb : nullptr, full).ok());
      const std::vector<float> ref = Download(full);
      for (int64_t m : kBatchSizes) {
        // Offsets: aligned, odd, and the last rows; m == 1 visits every row.
        std::vector<int64_t> offsets;
        if (m == 1) {
          for (int64_t r = 0; r < kRows; ++r) offsets.push_back(r);
        } else {
          offsets = {0, std::min<int64_t>(5, kRows - m), kRows - m};
        }
        int64_t bad_rows = 0;
        double max_rel = 0;  // how far apart the differing rows are
        std::ostringstream where;
        for (int64_t offset : offsets) {
          Tensor out = Poisoned({m, s.n});
          ASSERT_TRUE(
              backend().Matmul(tx.SliceRows(offset, offset + m), tw, bias ? &tb : nullptr, out)
                  .ok());
          const std::vector<float> got = Download(out);
          for (int64_t r = 0; r < m; ++r) {
            const auto row = std::span<const float>(got).subspan(r * s.n, s.n);
            const auto want = std::span<const float>(ref).subspan((offset + r) * s.n, s.n);
            if (!BitIdentical(row, want)) {
              if (bad_rows++ < 3) where << " row " << offset + r << " (offset " << offset << ")";
              for (int64_t c = 0; c < s.n; ++c) {
                max_rel = std::max(max_rel, std::abs(static_cast<double>(row[c]) - want[c]) /
                                                std::max(std::abs(want[c]), 1e-30f));
              }
            }
          }
        }
        if (bad_rows > 0) {
          ++broken_count;
          broken << "\n  K=" << s.k << " N=" << s.n << " bias=" << bias << " M=" << m << ": "
                 << bad_rows << " rows differ from the M=128 batch (max rel diff " << max_rel
                 << "), e.g." << where.str();
        }
      }
    }
  }
  EXPECT_EQ(broken_count, 0) << "Matmul is not batch invariant (" << GetParam().name
                             << "):" << broken.str();
}

}  // namespace
}  // namespace xserv::kernels::testing
