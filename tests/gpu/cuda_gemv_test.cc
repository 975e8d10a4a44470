// The skinny GEMV launcher (kernels/cuda/gemv.h) called directly: every tile and the PDL launch
// give bit-identical outputs (each output's reduction order depends only on k), and the result
// matches a double-precision host reference, for bf16 and block-scaled FP8 weights, on shapes
// with partial column groups and k not a multiple of a warp's chunks.
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
#include "kernels/cuda/fp8_gemv_mma.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/l2_prefetch.h"
#include "kernels/fp8.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

struct Shape {
  int m, n, k;
};
struct Tile {
  int cols, unroll;
};
constexpr Tile kTiles[] = {{0, 0}, {1, 4}, {1, 8}, {2, 4}, {4, 2}, {4, 4}};

template <typename T>
T* Upload(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = safetensors::FloatToBf16(v[i]);
  return out;
}

class Gemv : public ::testing::TestWithParam<bool> {  // param: FP8 weights
 protected:
  void SetUp() override {
    auto info = xserv::cuda::QueryRuntime();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_P(Gemv, EveryTileAndPdlMatchTheReferenceBitForBit) {
  const bool fp8 = GetParam();
  constexpr int kBlock = 128;
  // n: partial column groups for every tile; k: chunks not a multiple of 32 lanes (FP8 needs
  // k a multiple of 16); 12288: the down projection's k at m = 3 (x fills 72 KB of shared memory).
  // n = 40000: more column groups than the resident grid has warps, so warps take a second
  // group (the grid-stride loop's reloads); k = 64: lanes that never enter the k loop.
  const Shape shapes[] = {{1, 1000, 4096}, {3, 37, 144}, {8, 300, 1024}, {2, 4097, 528},
                          {3, 96, 12288},  {5, 1, 256},  {1, 40000, 64}, {2, 40000, 144}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    std::mt19937 rng(static_cast<uint32_t>(s.n * 7 + s.k));
    const std::vector<float> x = RandomBf16(static_cast<size_t>(s.m) * s.k, rng);
    std::vector<float> w = RandomBf16(static_cast<size_t>(s.n) * s.k, rng, -0.1f, 0.1f);
    Fp8Blocks q;
    if (fp8) {  // the weights the kernel sees are the FP8 ones
      q = QuantizeFp8Blocks(w, s.n, s.k, kBlock);
      DequantizeFp8Blocks(q, s.n, s.k, kBlock, w);
    }
    std::vector<double> expected(static_cast<size_t>(s.m) * s.n);
    for (int r = 0; r < s.m; ++r) {
      for (int n = 0; n < s.n; ++n) {
        double sum = 0;
        for (int i = 0; i < s.k; ++i) {
          sum += static_cast<double>(x[static_cast<size_t>(r) * s.k + i]) *
                 w[static_cast<size_t>(n) * s.k + i];
        }
        expected[static_cast<size_t>(r) * s.n + n] = sum;
      }
    }
    void* x_dev = Upload(ToBf16(x));
    void* w_dev = fp8 ? static_cast<void*>(Upload(q.codes)) : Upload(ToBf16(w));
    float* scales_dev = fp8 ? Upload(q.scale_inv) : nullptr;
    float* out_dev = nullptr;
    const size_t out_bytes = expected.size() * sizeof(float);
    constexpr size_t kGuard = 64;  // floats after the output that must stay untouched
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out_dev), out_bytes + kGuard * 4), cudaSuccess);

    const int64_t row_bytes = int64_t{s.k} * (fp8 ? 1 : 2);
    std::vector<float> first;
    for (const Tile& tile : kTiles) {
      for (const bool pdl : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "tile " << tile.cols << "x" << tile.unroll << (pdl ? " pdl" : ""));
        ASSERT_EQ(cudaMemset(out_dev, 0xff, out_bytes + kGuard * 4), cudaSuccess);  // NaN
        GemvArgs a{.x = x_dev,
                   .ldx = s.k,
                   .w = w_dev,
                   .ldw = s.k,
                   .out = out_dev,
                   .ldo = s.n,
                   .out_type = ElemType::kF32,
                   .m = s.m,
                   .n = s.n,
                   .k = s.k,
                   .scales = scales_dev,
                   .scale_cols = (s.k + kBlock - 1) / kBlock,
                   .block = fp8 ? kBlock : 0,
                   .pdl = pdl,
                   // With PDL, also both L2 prefetches (of this weight): they must change
                   // nothing.
                   .prefetch = pdl ? L2PrefetchFor(w_dev, row_bytes, s.n, row_bytes, 1 << 20)
                                   : L2Prefetch{},
                   .own_prefetch_bytes = pdl ? 1 << 20 : 0,
                   .tile_cols = tile.cols,
                   .tile_unroll = tile.unroll};
        ASSERT_TRUE(GemvSupports(a));
        ASSERT_EQ(LaunchGemv(a, nullptr), cudaSuccess);
        std::vector<float> out(expected.size() + kGuard);
        ASSERT_EQ(cudaMemcpy(out.data(), out_dev, out_bytes + kGuard * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        for (size_t g = expected.size(); g < out.size(); ++g) {
          uint32_t bits;
          std::memcpy(&bits, &out[g], 4);
          ASSERT_EQ(bits, 0xffffffffu) << "written past the output at " << g;
        }
        out.resize(expected.size());
        if (first.empty()) {
          double worst = 0, scale = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_FALSE(std::isnan(out[i])) << "output " << i << " not written";
            worst = std::max(worst, std::abs(out[i] - expected[i]));
            scale = std::max(scale, std::abs(expected[i]));
          }
          EXPECT_LE(worst / scale, 1e-5);  // fp32 accumulation over at most 12288 products
          first = out;
        } else {
          EXPECT_EQ(std::memcmp(out.data(), first.data(), out_bytes), 0);
        }
      }
    }
    cudaFree(x_dev);
    cudaFree(w_dev);
    cudaFree(scales_dev);
    cudaFree(out_dev);
  }
}

// The FP8 GEMV on tensor cores (fp8_gemv_mma.h) against a double-precision reference over the
// decoded weights, with and without PDL: shapes with a partial row tile, a partial last weight
// block (k = 576), x rows of very different magnitudes, k = 12288 at
// m = 3 and m = 8 (192 KB of x); and every row computed alone equals its row in the batch, bit
// for bit.
TEST(Fp8MmaGemv, MatchesTheReferenceAndRowsDoNotDependOnTheBatch) {
  auto info = xserv::cuda::QueryRuntime();
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  constexpr int kBlock = 128;
  // {2, 64, 12288}: x fills exactly the 48 KB a launch may take without raising its limit, which
  // the kernel's static shared memory counts against too.
  const Shape shapes[] = {{1, 1000, 4096}, {3, 37, 1024}, {8, 300, 1024}, {2, 4097, 576},
                          {3, 96, 12288},  {5, 1, 256},   {1, 40000, 64}, {4, 6144, 4096},
                          {8, 64, 12288},  {2, 64, 12288}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
    std::mt19937 rng(static_cast<uint32_t>(s.n * 5 + s.k));
    std::vector<float> x = RandomBf16(static_cast<size_t>(s.m) * s.k, rng);
    // Row r scaled by 2^(6r - 12): from 2^-12 to 2^30 (bf16 x takes them as they are).
    for (int r = 0; r < s.m; ++r) {
      const float f = std::ldexp(1.0f, 6 * r - 12);
      for (int i = 0; i < s.k; ++i) x[static_cast<size_t>(r) * s.k + i] *= f;
    }
    std::vector<float> w = RandomBf16(static_cast<size_t>(s.n) * s.k, rng, -0.1f, 0.1f);
    const Fp8Blocks q = QuantizeFp8Blocks(w, s.n, s.k, kBlock);
    DequantizeFp8Blocks(q, s.n, s.k, kBlock, w);
    void* x_dev = Upload(ToBf16(x));
    void* w_dev = Upload(q.codes);
    float* scales_dev = Upload(q.scale_inv);
    float* out_dev = nullptr;
    const size_t out_floats = static_cast<size_t>(s.m) * s.n;
    constexpr size_t kGuard = 64;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out_dev), (out_floats + kGuard) * 4),
              cudaSuccess);
    const auto run = [&](int m, const void* x_rows, bool pdl) {
      EXPECT_EQ(cudaMemset(out_dev, 0xff, (out_floats + kGuard) * 4), cudaSuccess);  // NaN
      const GemvArgs a{.x = x_rows,
                       .ldx = s.k,
                       .w = w_dev,
                       .ldw = s.k,
                       .out = out_dev,
                       .ldo = s.n,
                       .out_type = ElemType::kF32,
                       .m = m,
                       .n = s.n,
                       .k = s.k,
                       .scales = scales_dev,
                       .scale_cols = (s.k + kBlock - 1) / kBlock,
                       .block = kBlock,
                       .pdl = pdl,
                       // With PDL, also both L2 prefetches (of this weight): they must
                       // change nothing.
                       .prefetch = pdl ? L2PrefetchFor(w_dev, s.k, s.n, s.k, 1 << 20)
                                       : L2Prefetch{},
                       .own_prefetch_bytes = pdl ? 1 << 20 : 0};
      EXPECT_TRUE(Fp8MmaGemvSupports(a));
      EXPECT_EQ(LaunchFp8MmaGemv(a, nullptr), cudaSuccess);
      std::vector<float> out(out_floats + kGuard);
      EXPECT_EQ(cudaMemcpy(out.data(), out_dev, out.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (size_t g = static_cast<size_t>(m) * s.n; g < out.size(); ++g) {
        uint32_t bits;
        std::memcpy(&bits, &out[g], 4);
        EXPECT_EQ(bits, 0xffffffffu) << "written past the output at " << g;
      }
      out.resize(static_cast<size_t>(m) * s.n);
      return out;
    };
    const std::vector<float> batch = run(s.m, x_dev, false);
    EXPECT_EQ(std::memcmp(run(s.m, x_dev, true).data(), batch.data(), batch.size() * 4), 0);
    for (int r = 0; r < s.m; ++r) {
      double worst = 0, scale = 0;
      for (int n = 0; n < s.n; ++n) {
        double want = 0;
        for (int i = 0; i < s.k; ++i) {
          want += static_cast<double>(x[static_cast<size_t>(r) * s.k + i]) *
                  w[static_cast<size_t>(n) * s.k + i];
        }
        const float got = batch[static_cast<size_t>(r) * s.n + n];
        ASSERT_FALSE(std::isnan(got)) << "row " << r << " output " << n << " not written";
        worst = std::max(worst, std::abs(got - want));
        scale = std::max(scale, std::abs(want));
      }
      // fp32 sums of exact bf16 products; the tensor cores' own additions within a step round
      // too (the CUDA-core GEMV's bound is 1e-5).
      EXPECT_LE(worst / scale, 1e-4) << "row " << r;
      const auto* row = static_cast<const uint16_t*>(x_dev) + static_cast<size_t>(r) * s.k;
      const std::vector<float> alone = run(1, row, false);
      EXPECT_EQ(std::memcmp(alone.data(), batch.data() + static_cast<size_t>(r) * s.n, s.n * 4),
                0)
          << "row " << r << " alone";
    }
    cudaFree(x_dev);
    cudaFree(w_dev);
    cudaFree(scales_dev);
    cudaFree(out_dev);
  }
}

// Subnormal E4M3 codes are values, not zeros, in both FP8 GEMVs (the tensor-core one makes bf16
// of them by shifts and a multiply by 2^120): rows of 0x01 (2^-9) and of 0x87 (-7 * 2^-9) against
// x of ones, one block of scale 1, so the sums are exact: 128 * 2^-9 and -128 * 7 * 2^-9.
TEST(Fp8Gemvs, TakeSubnormalCodesAsValues) {
  auto info = xserv::cuda::QueryRuntime();
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  constexpr int kN = 16, kK = 128;
  std::vector<uint8_t> codes(kN * kK);
  for (int n = 0; n < kN; ++n) {
    std::fill_n(codes.begin() + n * kK, kK, n % 2 == 0 ? uint8_t{0x01} : uint8_t{0x87});
  }
  void* x_dev = Upload(ToBf16(std::vector<float>(kK, 1.0f)));
  void* w_dev = Upload(codes);
  float* scales_dev = Upload(std::vector<float>{1.0f});
  float* out_dev = Upload(std::vector<float>(kN, 0.0f));
  const GemvArgs a{.x = x_dev, .ldx = kK, .w = w_dev, .ldw = kK, .out = out_dev, .ldo = kN,
                   .out_type = ElemType::kF32, .m = 1, .n = kN, .k = kK, .scales = scales_dev,
                   .scale_cols = 1, .block = 128};
  for (const bool tensor_cores : {false, true}) {
    SCOPED_TRACE(tensor_cores ? "tensor cores" : "CUDA cores");
    ASSERT_EQ(cudaMemset(out_dev, 0, kN * 4), cudaSuccess);
    ASSERT_EQ(tensor_cores ? LaunchFp8MmaGemv(a, nullptr) : LaunchGemv(a, nullptr), cudaSuccess);
    std::vector<float> out(kN);
    ASSERT_EQ(cudaMemcpy(out.data(), out_dev, kN * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int n = 0; n < kN; ++n) {
      EXPECT_EQ(out[n], n % 2 == 0 ? 128.0f / 512 : -128.0f * 7 / 512) << "row " << n;
    }
  }
  cudaFree(x_dev);
  cudaFree(w_dev);
  cudaFree(scales_dev);
  cudaFree(out_dev);
}

// GemvArgs::glu: SiluMul as the gate_up GEMV's epilogue equals the plain GEMV's bf16 gate_up
// row fed to the SiluMul kernel, bit for bit, with and without a bias, in both of its tiles and
// with PDL (also chained after the kernel that writes x, x poisoned first).
TEST(GemvGluOutput, EqualsTheGemvThenTheSiluMulKernel) {
  auto info = xserv::cuda::QueryRuntime();
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->devices.empty()) GTEST_SKIP() << "no CUDA device visible";
  // n: gate and up rows stacked (Qwen3-8B's 2 x 12288 over 4096 inputs; a small odd half).
  for (const Shape& s : {Shape{1, 24576, 4096}, Shape{1, 74, 1000}}) {
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << s.n << " k=" << s.k << " bias " << with_bias);
      const int64_t half = s.n / 2;
      std::mt19937 rng(static_cast<uint32_t>(s.n + s.k + with_bias));
      const std::vector<float> x = RandomBf16(static_cast<size_t>(s.k), rng, -2.0f, 2.0f);
      const std::vector<float> w = RandomBf16(static_cast<size_t>(s.n) * s.k, rng, -0.1f, 0.1f);
      const std::vector<float> bias = RandomBf16(static_cast<size_t>(s.n), rng, -1.0f, 1.0f);
      const std::vector<uint16_t> x_bits = ToBf16(x);
      uint16_t* x_dev = Upload(x_bits);
      void* w_dev = Upload(ToBf16(w));
      void* bias_dev = Upload(ToBf16(bias));
      uint16_t* gate_up = nullptr;
      uint16_t* want = nullptr;
      uint16_t* got = nullptr;
      const size_t act_bytes = static_cast<size_t>(half) * 2;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&gate_up), s.n * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&want), act_bytes), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&got), act_bytes), cudaSuccess);
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      const GemvArgs plain{.x = x_dev,
                           .ldx = s.k,
                           .w = w_dev,
                           .ldw = s.k,
                           .out = gate_up,
                           .ldo = s.n,
                           .out_type = ElemType::kBF16,
                           .bias = with_bias ? bias_dev : nullptr,
                           .m = 1,
                           .n = s.n,
                           .k = s.k};
      ASSERT_EQ(LaunchGemv(plain, stream), cudaSuccess);
      const RowsView gate_rows{gate_up, 1, half, s.n}, up_rows{gate_up + half, 1, half, s.n};
      ASSERT_EQ(LaunchSiluMul(gate_rows, up_rows, RowsView{want, 1, half, half}, stream),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<uint16_t> expected(half), actual(half);
      ASSERT_EQ(cudaMemcpy(expected.data(), want, act_bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      // Not a trivial output: some activations are nonzero.
      EXPECT_TRUE(std::any_of(expected.begin(), expected.end(),
                              [](uint16_t v) { return (v & 0x7fff) != 0; }));
      GemvArgs fused = plain;
      fused.out = got;
      fused.ldo = half;
      fused.glu = true;
      ASSERT_TRUE(GemvSupports(fused));
      for (const int unroll : {0, 2, 4}) {  // 0: the default tile (2x4)
        for (const bool pdl : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "unroll " << unroll << (pdl ? " pdl" : ""));
          ASSERT_EQ(cudaMemsetAsync(got, 0xff, act_bytes, stream), cudaSuccess);
          GemvArgs run = fused;
          run.pdl = pdl;
          run.tile_cols = unroll == 0 ? 0 : 2;
          run.tile_unroll = unroll;
          if (pdl) {  // x rewritten by the kernel before (poison, then the real values)
            ASSERT_EQ(cudaMemsetAsync(x_dev, 0xff, s.k * 2, stream), cudaSuccess);
            ASSERT_EQ(cudaMemcpyAsync(x_dev, x_bits.data(), s.k * 2, cudaMemcpyHostToDevice, stream),
                      cudaSuccess);
          }
          ASSERT_EQ(LaunchGemv(run, stream), cudaSuccess);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(actual.data(), got, act_bytes, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          EXPECT_EQ(std::memcmp(actual.data(), expected.data(), act_bytes), 0);
        }
      }
      GemvArgs bad = fused;
      bad.n = s.n - 1;  // not a stack of two halves
      EXPECT_FALSE(GemvSupports(bad));
      EXPECT_EQ(LaunchGemv(bad, stream), cudaErrorInvalidValue);
      for (void* p : {static_cast<void*>(x_dev), w_dev, bias_dev, static_cast<void*>(gate_up),
                      static_cast<void*>(want), static_cast<void*>(got)}) {
        cudaFree(p);
      }
      cudaStreamDestroy(stream);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, Gemv, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fp8" : "Bf16"; });

// L2PrefetchFor (host arithmetic, no device): past the GEMV's first loads, the same whole lines
// of every row within the budget, capped at the rest of the row, nothing it cannot express.
TEST(L2PrefetchFor, SharesTheBudgetInWholeLinesPastTheFirstLoads) {
  alignas(16) static char weight[16];
  // Qwen3-8B's o projection, bf16: 4096 rows of 8 KB, 16 MiB: 4096 bytes of each row from 2 KB.
  L2Prefetch p = L2PrefetchFor(weight, 8192, 4096, 8192, int64_t{16} << 20);
  EXPECT_EQ(p.base, weight);
  EXPECT_EQ(p.stride, 8192);
  EXPECT_EQ(p.rows, 4096);
  EXPECT_EQ(p.offset, kGemvPreloadBytes);
  EXPECT_EQ(p.bytes, 4096);
  // A budget past the rest of each row: the rest (8192 - 2048), in 16-byte units.
  p = L2PrefetchFor(weight, 8192, 4096, 8192, int64_t{1} << 30);
  EXPECT_EQ(p.bytes, 8192 - kGemvPreloadBytes);
  p = L2PrefetchFor(weight, 4112, 10, 4104, int64_t{1} << 30);  // a row of 4104 bytes
  EXPECT_EQ(p.bytes, (4104 - kGemvPreloadBytes) / 16 * 16);
  // Whole lines: 1000 bytes a row rounds down to 896.
  p = L2PrefetchFor(weight, 8192, 1000, 8192, 1000 * 1000);
  EXPECT_EQ(p.bytes, 896);
  // Rows no longer than the first loads: prefetched from their start.
  p = L2PrefetchFor(weight, 1024, 100, 1024, int64_t{1} << 20);
  EXPECT_EQ(p.offset, 0);
  EXPECT_EQ(p.bytes, 1024);
  // Nothing: a budget under a line per row, no budget, unaligned rows or base, no rows.
  EXPECT_EQ(L2PrefetchFor(weight, 8192, 4096, 8192, 4096 * 127).rows, 0);
  EXPECT_EQ(L2PrefetchFor(weight, 8192, 4096, 8192, 0).rows, 0);
  EXPECT_EQ(L2PrefetchFor(weight, 8200, 10, 8192, int64_t{1} << 20).rows, 0);
  EXPECT_EQ(L2PrefetchFor(weight + 8, 8192, 10, 8192, int64_t{1} << 20).rows, 0);
  EXPECT_EQ(L2PrefetchFor(weight, 8192, 0, 8192, int64_t{1} << 20).rows, 0);
  EXPECT_EQ(L2PrefetchFor(nullptr, 8192, 10, 8192, int64_t{1} << 20).rows, 0);
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
