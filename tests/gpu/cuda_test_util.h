// Shared harness of the CUDA-vs-CPU tests: one CudaBackend and one CpuBackend, tensors uploaded to
// both from the same host values (bf16-rounded, so the two backends see identical operands and
// only their arithmetic differs), outputs poisoned with NaN before each op, and comparison as the
// relative error of a whole output tensor: max |cuda - cpu| / max |cpu|.
//
// Skips (GTEST_SKIP) when no CUDA device is visible. Single-threaded, like the engine loop.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"

namespace xserv::kernels::cuda::testing {

// Tolerances (relative error of the output tensor, see header comment):
// bf16 outputs from identical bf16 operands: one rounding (2^-9 relative) on top of fp32
// arithmetic that differs only in summation order; 1e-2 leaves room for cancellation.
inline constexpr double kBf16OutTol = 1e-2;
// f32 outputs of a GEMM over identical bf16 operands with fp32 accumulation: ~sqrt(K) * 2^-24.
inline constexpr double kF32GemmTol = 1e-3;
// f32 outputs of f32 ops (log-softmax, router weights): fp32 vs the CPU's double.
inline constexpr double kF32OpTol = 1e-5;

inline float RoundBf16(float v) { return safetensors::Bf16ToFloat(safetensors::FloatToBf16(v)); }

// Uniform in [lo, hi), rounded to bf16.
inline std::vector<float> RandomBf16(size_t n, std::mt19937& rng, float lo = -1.0f,
                                     float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(dist(rng));
  return v;
}

// Whether two results hold the same bits (NaNs included): fused kernels against the ops they
// replace.
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// max |a - b| / max |b|; NaN anywhere gives +inf.
inline double RelativeError(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(actual[i]) || std::isnan(expected[i])) return INFINITY;
    diff = std::max(diff, std::abs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// A tensor on both backends: `cpu` is f32 (or i32), `cuda` is `dtype` (bf16 for activations).
struct Twin {
  Tensor cpu;
  Tensor cuda;
};

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto info = xserv::cuda::QueryRuntime();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
    auto backend = CudaBackend::Create(CudaBackendOptions{.device = 0, .check_each_op = true});
    ASSERT_TRUE(backend.ok()) << backend.status();
    cuda_ = std::move(*backend);
    cpu_ = std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{.num_threads = 2});
  }
  void TearDown() override {
    buffers_.clear();  // before the backends
    cuda_.reset();
    cpu_.reset();
  }

  CudaBackend& cuda() { return *cuda_; }
  cpu::CpuBackend& cpu() { return *cpu_; }

  Tensor Keep(absl::StatusOr<Buffer> buffer) {
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return {};
    buffers_.push_back(std::move(*buffer));
    return buffers_.back().view();
  }

  // Host floats on both backends: f32 on the CPU, `cuda_dtype` on the device.
  Twin Upload(const std::vector<float>& host, std::initializer_list<int64_t> shape,
              DType cuda_dtype = DType::kBF16) {
    return Upload(host, std::vector<int64_t>(shape), cuda_dtype);
  }
  Twin Upload(const std::vector<float>& host, const std::vector<int64_t>& shape,
              DType cuda_dtype = DType::kBF16) {
    Twin t{Keep(cpu().Allocate(DType::kF32, shape)), Keep(cuda().Allocate(cuda_dtype, shape))};
    EXPECT_EQ(static_cast<size_t>(t.cpu.numel()), host.size());
    EXPECT_TRUE(cpu().CopyFromHost(host.data(), t.cpu).ok());
    UploadCuda(host, t.cuda);
    return t;
  }
  Twin UploadI32(const std::vector<int32_t>& host, std::initializer_list<int64_t> shape) {
    Twin t{Keep(cpu().Allocate(DType::kI32, shape)), Keep(cuda().Allocate(DType::kI32, shape))};
    EXPECT_TRUE(cpu().CopyFromHost(host.data(), t.cpu).ok());
    EXPECT_TRUE(cuda().CopyFromHost(host.data(), t.cuda).ok());
    return t;
  }
  // Output tensors filled with NaN on both backends.
  Twin Poisoned(std::initializer_list<int64_t> shape, DType cuda_dtype = DType::kBF16) {
    std::vector<int64_t> dims(shape);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return Upload(std::vector<float>(n, NAN), dims, cuda_dtype);
  }

  // Float contents of a contiguous CUDA tensor (bf16 / f16 / f32).
  std::vector<float> DownloadCuda(const Tensor& t) {
    std::vector<float> out(t.numel());
    if (t.dtype == DType::kF32) {
      EXPECT_TRUE(cuda().CopyToHost(t, out.data()).ok());
      return out;
    }
    std::vector<uint16_t> bits(t.numel());
    const absl::Status status = cuda().CopyToHost(t, bits.data());
    EXPECT_TRUE(status.ok()) << status;
    for (size_t i = 0; i < bits.size(); ++i) {
      out[i] = t.dtype == DType::kBF16 ? safetensors::Bf16ToFloat(bits[i])
                                       : safetensors::F16ToFloat(bits[i]);
    }
    return out;
  }
  std::vector<float> DownloadCpu(const Tensor& t) {
    std::vector<float> out(t.numel());
    EXPECT_TRUE(cpu().CopyToHost(t, out.data()).ok());
    return out;
  }
  double Error(const Twin& t) { return RelativeError(DownloadCuda(t.cuda), DownloadCpu(t.cpu)); }

  // Host floats into an existing device tensor (f32, bf16 or f16), e.g. to poison it again.
  void UploadCuda(const std::vector<float>& host, const Tensor& dst) {
    if (dst.dtype == DType::kF32) {
      EXPECT_TRUE(cuda().CopyFromHost(host.data(), dst).ok());
      return;
    }
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      bits[i] = dst.dtype == DType::kBF16 ? safetensors::FloatToBf16(host[i])
                                          : safetensors::FloatToF16(host[i]);
    }
    EXPECT_TRUE(cuda().CopyFromHost(bits.data(), dst).ok());
  }

 private:
  std::unique_ptr<CudaBackend> cuda_;
  std::unique_ptr<cpu::CpuBackend> cpu_;
  std::vector<Buffer> buffers_;
};

}  // namespace xserv::kernels::cuda::testing
