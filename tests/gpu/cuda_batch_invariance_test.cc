// Batch invariance of CUDA matmuls (CudaBackendOptions::batch_invariant, see kernels/cuda/gemm.h):
// the first rows of a GEMM over m rows must be bit-identical to the same rows computed in a GEMM
// of any other m. Shapes are those of the served models (Qwen3-8B / Llama-3-8B projections,
// GPT-2's logits), where cuBLASLt's per-m heuristic is known to change kernels.
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

struct Case {
  int64_t n, k;
  DType out;
};

class BatchInvariance : public ::testing::Test {
 protected:
  void SetUp() override {
    auto info = xserv::cuda::QueryRuntime();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  }

  // Rows of x·w^T for each m in `ms`, each computed by its own GEMM of m rows; returns how many
  // m gave rows that differ (bitwise) from the largest GEMM's.
  static int MismatchingBatchSizes(CudaBackend& backend, const Case& c,
                                   const std::vector<int64_t>& ms) {
    std::mt19937 rng(static_cast<uint32_t>(c.n * 31 + c.k));
    const int64_t max_m = ms.back();
    const std::vector<float> x_host = RandomBf16(max_m * c.k, rng);
    const std::vector<float> w_host = RandomBf16(c.n * c.k, rng, -0.05f, 0.05f);
    auto x32 = backend.Allocate(DType::kF32, {max_m, c.k});
    auto w32 = backend.Allocate(DType::kF32, {c.n, c.k});
    auto x = backend.Allocate(DType::kBF16, {max_m, c.k});
    auto w = backend.Allocate(DType::kBF16, {c.n, c.k});
    auto out = backend.Allocate(c.out, {max_m, c.n});
    EXPECT_TRUE(x32.ok() && w32.ok() && x.ok() && w.ok() && out.ok());
    EXPECT_TRUE(backend.CopyFromHost(x_host.data(), x32->view()).ok());
    EXPECT_TRUE(backend.CopyFromHost(w_host.data(), w32->view()).ok());
    EXPECT_TRUE(backend.Convert(x32->view(), x->view()).ok());
    EXPECT_TRUE(backend.Convert(w32->view(), w->view()).ok());
    const size_t row_bytes = static_cast<size_t>(c.n) * DTypeSize(c.out);
    std::vector<std::byte> full(static_cast<size_t>(max_m) * row_bytes);
    EXPECT_TRUE(backend.Matmul(x->view(), w->view(), nullptr, out->view()).ok());
    EXPECT_TRUE(backend.CopyToHost(out->view(), full.data()).ok());
    int mismatches = 0;
    for (int64_t m : ms) {
      const Tensor rows = out->view().SliceRows(0, m);
      EXPECT_TRUE(backend.Matmul(x->view().SliceRows(0, m), w->view(), nullptr, rows).ok());
      std::vector<std::byte> part(static_cast<size_t>(m) * row_bytes);
      EXPECT_TRUE(backend.CopyToHost(rows, part.data()).ok());
      if (std::memcmp(part.data(), full.data(), part.size()) != 0) ++mismatches;
    }
    return mismatches;
  }
};

const Case kCases[] = {{4096, 4096, DType::kBF16},    // q / o projections
                       {1024, 4096, DType::kBF16},    // k / v (8 KV heads)
                       {12288, 4096, DType::kBF16},   // Qwen3-8B gate / up
                       {4096, 12288, DType::kBF16},   // Qwen3-8B down
                       {50257, 768, DType::kF32}};    // GPT-2 logits
const std::vector<int64_t> kBatchSizes = {1, 2, 3, 5, 8, 13, 16, 31, 32, 64, 100, 128, 257, 512};

TEST_F(BatchInvariance, RowsDoNotDependOnBatchSize) {
  auto backend = CudaBackend::Create({.device = 0, .batch_invariant = true});
  ASSERT_TRUE(backend.ok()) << backend.status();
  for (const Case& c : kCases) {
    EXPECT_EQ(MismatchingBatchSizes(**backend, c, kBatchSizes), 0)
        << "n=" << c.n << " k=" << c.k;
  }
}

// Not a requirement, a record: how often cuBLASLt's own per-m choice changes the rows (what the
// mode above exists for). Printed so the GPU log documents it.
TEST_F(BatchInvariance, DefaultHeuristicIsReported) {
  auto backend = CudaBackend::Create({.device = 0});
  ASSERT_TRUE(backend.ok()) << backend.status();
  for (const Case& c : kCases) {
    const int mismatches = MismatchingBatchSizes(**backend, c, kBatchSizes);
    std::printf("default heuristic n=%lld k=%lld: %d of %zu batch sizes differ from m=512\n",
                static_cast<long long>(c.n), static_cast<long long>(c.k), mismatches,
                kBatchSizes.size());
  }
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
