// Instantiates the factory-parameterised op suites of tests/unit/kernels (double-precision
// references, rule 12) for the CUDA backend, in check mode so that device-side indices are refused
// like on the CPU. With no visible device there are no cases, so every suite is empty.
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

// Four cases: the default (single-row matmuls and weights of at most kGemvSmallWeightBytes take
// the skinny GEMV, the rest cuBLASLt's heuristic), the default with FP8 weights' decode rows on
// tensor cores (fp8_gemv_mma), cuBLASLt for every row count, and the batch-invariant mode,
// which alone promises rows independent of the batch.
std::vector<BackendCase> CudaCases() {
  auto info = xserv::cuda::QueryRuntime();
  if (!info.ok() || info->devices.empty()) return {};
  auto make = [](bool invariant, bool gemv, bool fp8_mma = false) {
    return [invariant, gemv, fp8_mma]() -> std::unique_ptr<Backend> {
      const cuda::CudaBackendOptions options{.device = 0,
                                             .check_each_op = true,
                                             .batch_invariant = invariant,
                                             .gemv = gemv,
                                             .fp8_gemv_mma = fp8_mma};
      auto backend = cuda::CudaBackend::Create(options);
      if (!backend.ok()) return nullptr;
      return std::move(*backend);
    };
  };
  return {BackendCase{.name = "Cuda", .make = make(false, true), .batch_invariant = false},
          BackendCase{
              .name = "CudaFp8Mma", .make = make(false, true, true), .batch_invariant = false},
          BackendCase{.name = "CudaNoGemv", .make = make(false, false), .batch_invariant = false},
          BackendCase{.name = "CudaBatchInvariant",
                      .make = make(true, false),
                      .batch_invariant = true,
                      .may_refuse_tiny_matmuls = true}};
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ElementwiseOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NormOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MatmulOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RopeOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MoeOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MemoryOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SampleOpTest);

XSERV_INSTANTIATE_BACKEND_OP_TESTS(Cuda, ::testing::ValuesIn(CudaCases()));

}  // namespace
}  // namespace xserv::kernels::testing
