// Shared harness of the op-level kernel tests (tests/unit/kernels/). Every op test is a TEST_P over
// a BackendCase, so the same bodies become the CUDA backend's oracle tests by instantiating them
// with another factory (XSERV_INSTANTIATE_BACKEND_OP_TESTS below); only the CPU backend is
// instantiated today (cpu_backend_cases.cc).
//
// Ownership: each test owns one fresh Backend (made in SetUp) and every Buffer it uploads; buffers
// are released before the backend. Single-threaded like the engine loop that owns a real backend.
//
// Conventions: inputs are random from fixed seeds; inputs and weights live in the backend's
// compute dtype and the host copy is replaced by what the device holds (so the double-precision
// references see the exact operands); outputs start as NaN so an op that skips a row is caught.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace xserv::kernels::testing {

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

struct BackendCase {
  std::string name;  // test-name suffix: letters, digits and underscores only
  BackendFactory make;
  // Whether the backend promises batch-invariant matmuls (the CPU always; CUDA in its
  // batch-invariant mode only). The invariance test skips backends that do not.
  bool batch_invariant = true;
  // cuBLASLt's batch-invariant mode has no algorithm for some shapes no model has (n or k below
  // 8); such calls may be refused with Unimplemented instead of computed.
  bool may_refuse_tiny_matmuls = false;
};

// gtest prints parameters of failing tests; the name is all that identifies a case.
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

inline std::string BackendCaseName(const ::testing::TestParamInfo<BackendCase>& info) {
  return info.param.name;
}

// Per-dtype bound of one op (rule 12): which one applies depends on the backend's compute dtype.
// Each use states why the f32 value is what it is; bf16 values are provisional until a bf16
// backend exists to calibrate them.
struct Tolerance {
  double f32;
  double bf16;
};

// Uniform floats in [lo, hi).
std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);

// |actual[i] - expected[i]| <= tol * scale[i] for every i; equal infinities pass, NaN fails. On
// failure names the worst element and how many failed.
::testing::AssertionResult AllWithin(std::span<const float> actual,
                                     std::span<const double> expected,
                                     std::span<const double> scale, double tol);
// AllWithin with scale[i] = max(|expected[i]|, floor): relative error with an absolute floor.
::testing::AssertionResult AllClose(std::span<const float> actual,
                                    std::span<const double> expected, double tol,
                                    double floor = 1e-30);
// Bitwise equality of two float arrays (NaN payloads included).
::testing::AssertionResult BitIdentical(std::span<const float> a, std::span<const float> b);

// Base fixture: a fresh backend per test plus upload/download helpers that keep the buffers alive
// until TearDown.
class BackendOpTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override;
  void TearDown() override;

 public:
  // Public so that helpers shared by several tests of a file can take the fixture.
  Backend& backend() { return *backend_; }
  DType act_dtype() const { return backend_->compute_dtype(); }
  double Tol(const Tolerance& tol) const {
    return backend_->compute_dtype() == DType::kF32 ? tol.f32 : tol.bf16;
  }

  // A zeroed device tensor (kept alive by the fixture).
  Tensor Alloc(DType dtype, std::span<const int64_t> shape);
  Tensor Alloc(DType dtype, std::initializer_list<int64_t> shape) {
    return Alloc(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Host floats into a compute-dtype tensor; `host` becomes the values the device holds.
  Tensor Upload(std::vector<float>& host, std::initializer_list<int64_t> shape);
  Tensor Upload(std::vector<float>& host, std::span<const int64_t> shape);
  // Host floats into an f32 tensor on every backend (logits, router, RoPE tables, sinks).
  Tensor UploadF32(const std::vector<float>& host, std::initializer_list<int64_t> shape);
  Tensor UploadI32(const std::vector<int32_t>& host, std::initializer_list<int64_t> shape);
  // A compute-dtype (or f32) tensor filled with NaN: the poisoned output of an op.
  Tensor Poisoned(std::initializer_list<int64_t> shape, bool f32 = false);
  Tensor Poisoned(std::span<const int64_t> shape, bool f32 = false);
  // Any float tensor (contiguous, or a rank-2 row-strided view) back to host floats.
  std::vector<float> Download(const Tensor& t);
  std::vector<int32_t> DownloadI32(const Tensor& t);

 private:
  std::unique_ptr<Backend> backend_;
  std::vector<Buffer> buffers_;  // released in TearDown, before backend_
};

// One fixture per op family (distinct suite names); all share BackendOpTest's harness.
class ElementwiseOpTest : public BackendOpTest {};
class NormOpTest : public BackendOpTest {};
class MatmulOpTest : public BackendOpTest {};
class RopeOpTest : public BackendOpTest {};
class AttentionOpTest : public BackendOpTest {};
class MoeOpTest : public BackendOpTest {};
class MemoryOpTest : public BackendOpTest {};
class SampleOpTest : public BackendOpTest {};

}  // namespace xserv::kernels::testing

// Instantiates every op suite for the BackendCase values of `generator` (a gtest generator such as
// ::testing::Values(...)). Use once per backend, in a .cc file of the test binary.
#define XSERV_INSTANTIATE_BACKEND_OP_TESTS(prefix, generator)                                    \
  INSTANTIATE_TEST_SUITE_P(prefix, ElementwiseOpTest, generator, BackendCaseName);               \
  INSTANTIATE_TEST_SUITE_P(prefix, NormOpTest, generator, BackendCaseName);                      \
  INSTANTIATE_TEST_SUITE_P(prefix, MatmulOpTest, generator, BackendCaseName);                    \
  INSTANTIATE_TEST_SUITE_P(prefix, RopeOpTest, generator, BackendCaseName);                      \
  INSTANTIATE_TEST_SUITE_P(prefix, AttentionOpTest, generator, BackendCaseName);                 \
  INSTANTIATE_TEST_SUITE_P(prefix, MoeOpTest, generator, BackendCaseName);                       \
  INSTANTIATE_TEST_SUITE_P(prefix, MemoryOpTest, generator, BackendCaseName);                    \
  INSTANTIATE_TEST_SUITE_P(prefix, SampleOpTest, generator, BackendCaseName)
