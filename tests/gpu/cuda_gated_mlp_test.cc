// The one-kernel gated MLP at one row (kernels/cuda/gated_mlp_gemv.h) against the three kernels it
// replaces (the FP8 gate_up GEMV, SiluMul, the FP8 down GEMV, themselves checked against host
// references in cuda_gemv_test.cc): the same output within one bf16 rounding (its partial sums add
// in another order), the norm prologue's sums and normalised rows bit for bit, and the scratch
// left zero for the next launch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gated_mlp_gemv.h"
#include "kernels/cuda/gemv.h"
#include "kernels/fp8.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

constexpr int kBlock = 128;

// Device copy of a host vector, freed with the object.
class DeviceVector {
 public:
  template <typename T>
  explicit DeviceVector(const std::vector<T>& host) : bytes_(host.size() * sizeof(T)) {
    EXPECT_EQ(cudaMalloc(&p_, bytes_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DeviceVector(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes_), cudaSuccess);
    EXPECT_EQ(cudaMemset(p_, 0, bytes_), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(p_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = safetensors::FloatToBf16(v[i]);
  return out;
}

struct MlpShape {
  int hidden, inter;
};

TEST(GatedMlpGemv, MatchesTheGemvChainWithinABf16Rounding) {
  auto info = xserv::cuda::QueryRuntime();
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  // Qwen3-8B's MLP; a small one; one with more 32-column units than the resident grid holds (the
  // grid-stride loop's second units and their reloads; the chain's down GEMV stages its 40,960
  // inputs in 80 KB of shared memory).
  for (const MlpShape s : {MlpShape{4096, 12288}, MlpShape{1024, 3072}, MlpShape{1024, 40960}}) {
    for (const bool norm : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "hidden " << s.hidden << " inter " << s.inter
                                        << (norm ? " norm" : ""));
      std::mt19937 rng(static_cast<uint32_t>(s.hidden + s.inter + norm));
      const std::vector<float> x = RandomBf16(s.hidden, rng, -2.0f, 2.0f);
      const std::vector<float> residual = RandomBf16(s.hidden, rng, -2.0f, 2.0f);
      const std::vector<float> norm_weight = RandomBf16(s.hidden, rng, 0.5f, 1.5f);
      const Fp8Blocks gate_up = QuantizeFp8Blocks(
          RandomBf16(size_t{2} * s.inter * s.hidden, rng, -0.1f, 0.1f), 2 * s.inter, s.hidden,
          kBlock);
      const Fp8Blocks down = QuantizeFp8Blocks(
          RandomBf16(size_t{1} * s.hidden * s.inter, rng, -0.1f, 0.1f), s.hidden, s.inter,
          kBlock);
      const DeviceVector x_dev(ToBf16(x)), residual_dev(ToBf16(residual));
      const DeviceVector norm_weight_dev(ToBf16(norm_weight));
      const DeviceVector gate_up_dev(gate_up.codes), gate_up_scales(gate_up.scale_inv);
      const DeviceVector down_dev(down.codes), down_scales(down.scale_inv);
      const Fp8Blocks transposed =
          TransposeFp8Blocks(down.codes, down.scale_inv, s.hidden, s.inter, kBlock);
      const DeviceVector down_t(transposed.codes), down_t_scales(transposed.scale_inv);
      const size_t h_bytes = size_t{2} * s.hidden;
      const DeviceVector gate_up_out(size_t{4} * s.inter), want(h_bytes), got(h_bytes);
      const DeviceVector normed_want(h_bytes), normed_got(h_bytes);
      const DeviceVector sum_want(h_bytes), sum_got(h_bytes);
      const DeviceVector accum(size_t{4} * s.hidden), arrivals(sizeof(unsigned));
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      const auto norm_of = [&](const DeviceVector& normed, const DeviceVector& sum) {
        GemvNorm n;
        if (!norm) return n;
        n = {.residual = residual_dev.get(), .ld_residual = s.hidden,
             .residual_out = sum.get(), .ld_residual_out = s.hidden, .normed = normed.get(),
             .ld_normed = s.hidden, .weight = norm_weight_dev.get()};
        return n;
      };

      // The chain: the norm-fused gate_up GEMV (FP8 GEMVs take the prologue), SiluMul, down.
      const GemvArgs gu{.x = x_dev.get(), .ldx = s.hidden, .w = gate_up_dev.get(),
                        .ldw = s.hidden, .out = gate_up_out.get(), .ldo = 2 * s.inter, .m = 1,
                        .n = 2 * s.inter, .k = s.hidden, .scales = gate_up_scales.get<float>(),
                        .scale_cols = s.hidden / kBlock, .block = kBlock,
                        .norm = norm_of(normed_want, sum_want)};
      ASSERT_EQ(LaunchGemv(gu, stream), cudaSuccess);
      auto* g = gate_up_out.get<uint16_t>();
      const RowsView gate{g, 1, s.inter, 2 * s.inter}, up{g + s.inter, 1, s.inter, 2 * s.inter};
      ASSERT_EQ(LaunchSiluMul(gate, up, gate, stream), cudaSuccess);
      const GemvArgs dn{.x = g, .ldx = 2 * s.inter, .w = down_dev.get(), .ldw = s.inter,
                        .out = want.get(), .ldo = s.hidden, .m = 1, .n = s.hidden, .k = s.inter,
                        .scales = down_scales.get<float>(), .scale_cols = s.inter / kBlock,
                        .block = kBlock};
      ASSERT_EQ(LaunchGemv(dn, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<float> expected;
      for (const uint16_t b : want.Download<uint16_t>()) {
        expected.push_back(safetensors::Bf16ToFloat(b));
      }
      double scale = 0;
      for (const float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
      ASSERT_GT(scale, 0.0);  // not a trivial output

      const GatedMlpGemvArgs fused{
          .x = x_dev.get(), .norm = norm_of(normed_got, sum_got),
          .gate_up = gate_up_dev.get<uint8_t>(),
          .gate_up_scales = gate_up_scales.get<float>(), .down_t = down_t.get<uint8_t>(),
          .down_t_scales = down_t_scales.get<float>(), .block = kBlock, .hidden = s.hidden,
          .inter = s.inter, .out = got.get(), .accum = accum.get<float>(),
          .arrivals = arrivals.get<unsigned>()};
      ASSERT_TRUE(GatedMlpGemvSupports(fused));
      for (const bool pdl : {false, true, false}) {  // three launches: the scratch reused
        SCOPED_TRACE(pdl ? "pdl" : "plain");
        ASSERT_EQ(cudaMemsetAsync(got.get(), 0xff, h_bytes, stream), cudaSuccess);
        GatedMlpGemvArgs run = fused;
        run.pdl = pdl;
        ASSERT_EQ(LaunchGatedMlpGemv(run, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const std::vector<uint16_t> actual = got.Download<uint16_t>();
        int off = 0;
        for (int i = 0; i < s.hidden; ++i) {
          const double a = safetensors::Bf16ToFloat(actual[i]), e = expected[i];
          // One bf16 rounding apart at most (2^-7 of the larger), or 1e-3 of the output's scale
          // where the sum cancels.
          const double tol =
              std::max(std::ldexp(std::max(std::fabs(a), std::fabs(e)), -7), 1e-3 * scale);
          if (!(std::fabs(a - e) <= tol) && off++ < 5) {
            ADD_FAILURE() << "output " << i << ": " << a << " vs the chain's " << e;
          }
        }
        EXPECT_EQ(off, 0);
        const std::vector<float> left = accum.Download<float>();
        EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](float v) { return v == 0.0f; }));
        EXPECT_EQ(arrivals.Download<unsigned>()[0], 0u);
      }
      if (norm) {  // CTA 0's sums and normalised rows: the norm kernel's bits, as the GEMV's
        EXPECT_EQ(normed_got.Download<uint16_t>(), normed_want.Download<uint16_t>());
        EXPECT_EQ(sum_got.Download<uint16_t>(), sum_want.Download<uint16_t>());
      }
      GatedMlpGemvArgs bad = fused;
      bad.inter = s.inter - 32;  // not whole pairs of 32-column units
      EXPECT_FALSE(GatedMlpGemvSupports(bad));
      EXPECT_EQ(LaunchGatedMlpGemv(bad, stream), cudaErrorInvalidValue);
      bad = fused;
      bad.block = 64;
      EXPECT_FALSE(GatedMlpGemvSupports(bad));
      cudaStreamDestroy(stream);
    }
  }
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
