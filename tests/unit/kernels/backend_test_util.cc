#include "tests/unit/kernels/backend_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace xserv::kernels::testing {

std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

::testing::AssertionResult AllWithin(std::span<const float> actual,
                                     std::span<const double> expected,
                                     std::span<const double> scale, double tol) {
  if (actual.size() != expected.size() || scale.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size mismatch: " << actual.size() << " actual, "
                                         << expected.size() << " expected, " << scale.size()
                                         << " scales";
  }
  size_t failures = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isinf(e) && a == e) continue;
    const double err = std::abs(a - e);
    const double bound = tol * scale[i];
    // Written so that NaN (in actual or expected) counts as a failure.
    if (!(err <= bound)) {
      ++failures;
      const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity()
                                           : err / std::max(bound, 1e-300);
      if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << actual.size() << " elements out of tolerance " << tol
         << "; worst [" << worst << "]: actual " << actual[worst] << ", expected "
         << expected[worst] << ", |diff| " << std::abs(actual[worst] - expected[worst])
         << ", allowed " << tol * scale[worst];
}

::testing::AssertionResult AllClose(std::span<const float> actual,
                                    std::span<const double> expected, double tol, double floor) {
  std::vector<double> scale(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) scale[i] = std::max(std::abs(expected[i]), floor);
  return AllWithin(actual, expected, scale, tol);
}

::testing::AssertionResult BitIdentical(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  }
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diffs << " of " << a.size() << " elements differ; first ["
                                       << first << "]: " << a[first] << " vs " << b[first];
}

void BackendOpTest::SetUp() {
  backend_ = GetParam().make();
  ASSERT_NE(backend_, nullptr);
}

void BackendOpTest::TearDown() {
  buffers_.clear();
  backend_.reset();
}

Tensor BackendOpTest::Alloc(DType dtype, std::span<const int64_t> shape) {
  auto buffer = backend_->Allocate(dtype, shape);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return Tensor{};
  buffers_.push_back(std::move(*buffer));
  return buffers_.back().view();
}

Tensor BackendOpTest::Upload(std::vector<float>& host, std::initializer_list<int64_t> shape) {
  return Upload(host, std::span<const int64_t>(shape.begin(), shape.size()));
}

Tensor BackendOpTest::Upload(std::vector<float>& host, std::span<const int64_t> shape) {
  Tensor staging = Alloc(DType::kF32, shape);
  EXPECT_EQ(static_cast<size_t>(staging.numel()), host.size());
  EXPECT_TRUE(backend_->CopyFromHost(host.data(), staging).ok());
  if (act_dtype() == DType::kF32) return staging;
  Tensor t = Alloc(act_dtype(), shape);
  EXPECT_TRUE(backend_->Convert(staging, t).ok());
  host = Download(t);  // the reference must see the rounded operands
  return t;
}

Tensor BackendOpTest::UploadF32(const std::vector<float>& host,
                                std::initializer_list<int64_t> shape) {
  Tensor t = Alloc(DType::kF32, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), host.size());
  EXPECT_TRUE(backend_->CopyFromHost(host.data(), t).ok());
  return t;
}

Tensor BackendOpTest::UploadI32(const std::vector<int32_t>& host,
                                std::initializer_list<int64_t> shape) {
  Tensor t = Alloc(DType::kI32, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), host.size());
  EXPECT_TRUE(backend_->CopyFromHost(host.data(), t).ok());
  return t;
}

Tensor BackendOpTest::Poisoned(std::initializer_list<int64_t> shape, bool f32) {
  return Poisoned(std::span<const int64_t>(shape.begin(), shape.size()), f32);
}

Tensor BackendOpTest::Poisoned(std::span<const int64_t> shape, bool f32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
  if (f32) {
    Tensor t = Alloc(DType::kF32, shape);
    EXPECT_TRUE(backend_->CopyFromHost(nan.data(), t).ok());
    return t;
  }
  return Upload(nan, shape);
}

std::vector<float> BackendOpTest::Download(const Tensor& t) {
  std::vector<float> host(t.numel());
  EXPECT_TRUE(t.is_contiguous()) << "Download takes contiguous tensors, got " << t.Describe();
  Tensor f32 = t;
  if (t.dtype != DType::kF32) {
    f32 = Alloc(DType::kF32, std::span<const int64_t>(t.shape.data(), t.rank));
    EXPECT_TRUE(backend_->Convert(t, f32).ok());
  }
  EXPECT_TRUE(backend_->CopyToHost(f32, host.data()).ok());
  return host;
}

std::vector<int32_t> BackendOpTest::DownloadI32(const Tensor& t) {
  std::vector<int32_t> host(t.numel());
  EXPECT_EQ(t.dtype, DType::kI32);
  EXPECT_TRUE(backend_->CopyToHost(t, host.data()).ok());
  return host;
}

}  // namespace xserv::kernels::testing
