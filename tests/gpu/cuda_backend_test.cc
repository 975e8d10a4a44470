// Every op of the CUDA backend against the CPU backend (the HF-matched oracle) on the same random
// bf16-representable inputs, over several shapes including odd ones. Tolerances: see
// cuda_test_util.h. Skipped without a device.
#include <algorithm>
#include <numeric>
#include <span>

#include <cuda_runtime_api.h>

#include "common/safetensors/float_convert.h"
#include "kernels/fp8.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/op_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

using ::testing::Values;

struct Shape2 {
  int64_t rows, cols;
};
const Shape2 kRowShapes[] = {{1, 64}, {7, 33}, {3, 1000}, {5, 4096}, {130, 128}, {2, 513}};

class CudaOps : public CudaVsCpuTest {};

TEST_F(CudaOps, AllocateIsZeroedAndCopiesRoundTrip) {
  const Tensor t = Keep(cuda().Allocate(DType::kF32, {37, 5}));
  std::vector<float> host(37 * 5, 1.0f);
  ASSERT_TRUE(cuda().CopyToHost(t, host.data()).ok());
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float v) { return v == 0.0f; }));
  std::mt19937 rng(1);
  std::vector<float> values = RandomBf16(37 * 5, rng);
  ASSERT_TRUE(cuda().CopyFromHost(values.data(), t).ok());
  EXPECT_EQ(DownloadCuda(t), values);
}

// Querying the devices (as the worker does when it sizes the KV cache) must leave the backend's
// device current: on a two-GPU host a query once left the last device current, the next
// cudaMalloc landed there and the memset on the backend's stream failed.
TEST_F(CudaOps, AllocateAfterQueryingEveryDevice) {
  auto info = xserv::cuda::QueryRuntime();
  ASSERT_TRUE(info.ok()) << info.status();
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0) << "of " << info->devices.size() << " devices";
  auto buffer = cuda().Allocate(DType::kF32, {1024});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::vector<float> host(1024, 1.0f);
  ASSERT_TRUE(cuda().CopyToHost(buffer->view(), host.data()).ok());
  EXPECT_EQ(host, std::vector<float>(1024, 0.0f));
}

TEST_F(CudaOps, ConvertBetweenFloatTypes) {
  std::mt19937 rng(2);
  const std::vector<float> values = RandomBf16(1001, rng, -300.0f, 300.0f);
  const Twin src = Upload(values, {1001}, DType::kF32);
  const Tensor bf = Keep(cuda().Allocate(DType::kBF16, {1001}));
  const Tensor f16 = Keep(cuda().Allocate(DType::kF16, {1001}));
  const Tensor back = Keep(cuda().Allocate(DType::kF32, {1001}));
  const Tensor copy = Keep(cuda().Allocate(DType::kF32, {1001}));
  ASSERT_TRUE(cuda().Convert(src.cuda, bf).ok());
  EXPECT_EQ(DownloadCuda(bf), values);  // bf16-representable values convert exactly
  ASSERT_TRUE(cuda().Convert(bf, f16).ok());
  ASSERT_TRUE(cuda().Convert(f16, back).ok());
  const std::vector<float> via_f16 = DownloadCuda(back);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(via_f16[i], safetensors::F16ToFloat(safetensors::FloatToF16(values[i]))) << i;
  }
  ASSERT_TRUE(cuda().Convert(src.cuda, copy).ok());  // same dtype: device copy
  EXPECT_EQ(DownloadCuda(copy), values);
}

TEST_F(CudaOps, EmbeddingAndAccumulate) {
  std::mt19937 rng(3);
  for (const Shape2 s : {Shape2{5, 64}, Shape2{300, 33}, Shape2{17, 2048}}) {
    const int64_t vocab = 97, tokens = s.rows, hidden = s.cols;
    const Twin table = Upload(RandomBf16(vocab * hidden, rng), {vocab, hidden});
    const Twin table2 = Upload(RandomBf16(vocab * hidden, rng), {vocab, hidden});
    std::vector<int32_t> ids(tokens);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
    const Twin id_t = UploadI32(ids, {tokens});
    const Twin out = Poisoned({tokens, hidden});
    ASSERT_TRUE(cpu().Embedding(table.cpu, id_t.cpu, out.cpu, false).ok());
    ASSERT_TRUE(cuda().Embedding(table.cuda, id_t.cuda, out.cuda, false).ok());
    EXPECT_EQ(Error(out), 0.0) << tokens << "x" << hidden;
    ASSERT_TRUE(cpu().Embedding(table2.cpu, id_t.cpu, out.cpu, true).ok());
    ASSERT_TRUE(cuda().Embedding(table2.cuda, id_t.cuda, out.cuda, true).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << tokens << "x" << hidden;
  }
}

TEST_F(CudaOps, RmsNormRowsAndHeads) {
  std::mt19937 rng(4);
  for (const Shape2 s : kRowShapes) {
    const Twin x = Upload(RandomBf16(s.rows * s.cols, rng, -3, 3), {s.rows, s.cols});
    const Twin w = Upload(RandomBf16(s.cols, rng, 0.5f, 1.5f), {s.cols});
    const Twin out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(cpu().RmsNorm(x.cpu, w.cpu, 1e-6f, out.cpu).ok());
    ASSERT_TRUE(cuda().RmsNorm(x.cuda, w.cuda, 1e-6f, out.cuda).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << s.rows << "x" << s.cols;
  }
  // QK-norm shape, in place ([T, heads, head_dim] rows of head_dim).
  const Twin q = Upload(RandomBf16(9 * 4 * 128, rng, -2, 2), {9, 4, 128});
  const Twin w = Upload(RandomBf16(128, rng, 0.5f, 1.5f), {128});
  ASSERT_TRUE(cpu().RmsNorm(q.cpu, w.cpu, 1e-6f, q.cpu).ok());
  ASSERT_TRUE(cuda().RmsNorm(q.cuda, w.cuda, 1e-6f, q.cuda).ok());
  EXPECT_LE(Error(q), kBf16OutTol);
}

TEST_F(CudaOps, AddRmsNormUpdatesResidual) {
  std::mt19937 rng(5);
  for (const Shape2 s : kRowShapes) {
    const Twin x = Upload(RandomBf16(s.rows * s.cols, rng, -2, 2), {s.rows, s.cols});
    const Twin res = Upload(RandomBf16(s.rows * s.cols, rng, -2, 2), {s.rows, s.cols});
    const Twin w = Upload(RandomBf16(s.cols, rng, 0.5f, 1.5f), {s.cols});
    const Twin out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(cpu().AddRmsNorm(x.cpu, res.cpu, w.cpu, 1e-5f, out.cpu).ok());
    ASSERT_TRUE(cuda().AddRmsNorm(x.cuda, res.cuda, w.cuda, 1e-5f, out.cuda).ok());
    EXPECT_LE(Error(res), kBf16OutTol) << s.rows << "x" << s.cols;
    EXPECT_LE(Error(out), kBf16OutTol) << s.rows << "x" << s.cols;
  }
}

TEST_F(CudaOps, LayerNorm) {
  std::mt19937 rng(6);
  for (const Shape2 s : kRowShapes) {
    // A large mean checks the two-pass variance.
    const Twin x = Upload(RandomBf16(s.rows * s.cols, rng, 3, 5), {s.rows, s.cols});
    const Twin w = Upload(RandomBf16(s.cols, rng, 0.5f, 1.5f), {s.cols});
    const Twin b = Upload(RandomBf16(s.cols, rng), {s.cols});
    const Twin out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(cpu().LayerNorm(x.cpu, w.cpu, b.cpu, 1e-5f, out.cpu).ok());
    ASSERT_TRUE(cuda().LayerNorm(x.cuda, w.cuda, b.cuda, 1e-5f, out.cuda).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << s.rows << "x" << s.cols;
  }
}

TEST_F(CudaOps, AddSiluMulGeluOnStridedSlices) {
  std::mt19937 rng(7);
  for (const Shape2 s : kRowShapes) {
    // gate and up as column slices of one [rows, 2 * cols] matrix, like a fused projection.
    const Twin fused = Upload(RandomBf16(s.rows * 2 * s.cols, rng, -4, 4), {s.rows, 2 * s.cols});
    const Twin gate{fused.cpu.SliceLast(0, s.cols), fused.cuda.SliceLast(0, s.cols)};
    const Twin up{fused.cpu.SliceLast(s.cols, 2 * s.cols),
                  fused.cuda.SliceLast(s.cols, 2 * s.cols)};
    const Twin out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(cpu().SiluMul(gate.cpu, up.cpu, out.cpu).ok());
    ASSERT_TRUE(cuda().SiluMul(gate.cuda, up.cuda, out.cuda).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << "SiluMul " << s.rows << "x" << s.cols;
    const Twin sum = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(cpu().Add(gate.cpu, up.cpu, sum.cpu).ok());
    ASSERT_TRUE(cuda().Add(gate.cuda, up.cuda, sum.cuda).ok());
    EXPECT_LE(Error(sum), kBf16OutTol) << "Add " << s.rows << "x" << s.cols;
    ASSERT_TRUE(cpu().GeluTanh(sum.cpu, sum.cpu).ok());  // in place
    ASSERT_TRUE(cuda().GeluTanh(sum.cuda, sum.cuda).ok());
    EXPECT_LE(Error(sum), kBf16OutTol) << "GeluTanh " << s.rows << "x" << s.cols;
  }
}

TEST_F(CudaOps, GatherRowsAndLogSoftmax) {
  std::mt19937 rng(8);
  for (const Shape2 s : kRowShapes) {
    const Twin x = Upload(RandomBf16(s.rows * s.cols, rng), {s.rows, s.cols});
    std::vector<int32_t> idx(s.rows + 2);
    for (auto& i : idx) i = static_cast<int32_t>(rng() % s.rows);
    const int64_t l = static_cast<int64_t>(idx.size());
    const Twin idx_t = UploadI32(idx, {l});
    const Twin out = Poisoned({l, s.cols});
    ASSERT_TRUE(cpu().GatherRows(x.cpu, idx_t.cpu, out.cpu).ok());
    ASSERT_TRUE(cuda().GatherRows(x.cuda, idx_t.cuda, out.cuda).ok());
    EXPECT_EQ(Error(out), 0.0) << s.rows << "x" << s.cols;

    const Twin logits = Upload(RandomBf16(s.rows * s.cols, rng, -20, 20), {s.rows, s.cols},
                               DType::kF32);
    ASSERT_TRUE(cpu().LogSoftmax(logits.cpu, logits.cpu).ok());  // in place
    ASSERT_TRUE(cuda().LogSoftmax(logits.cuda, logits.cuda).ok());
    EXPECT_LE(Error(logits), kF32OpTol) << s.rows << "x" << s.cols;
  }
}

struct GemmShape {
  int64_t m, n, k;
};

TEST_F(CudaOps, MatmulShapesBiasAndF32Out) {
  std::mt19937 rng(9);
  const GemmShape shapes[] = {{1, 64, 64},    {7, 33, 65},    {128, 256, 512}, {3, 1000, 256},
                              {1, 4096, 512}, {257, 96, 160}, {16, 512, 64}};
  for (const GemmShape s : shapes) {
    const Twin x = Upload(RandomBf16(s.m * s.k, rng), {s.m, s.k});
    const Twin w = Upload(RandomBf16(s.n * s.k, rng, -0.2f, 0.2f), {s.n, s.k});
    const Twin bias = Upload(RandomBf16(s.n, rng), {s.n});
    const Twin out = Poisoned({s.m, s.n});
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, nullptr, out.cpu).ok());
    ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, nullptr, out.cuda).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << s.m << "x" << s.n << "x" << s.k;
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, &bias.cpu, out.cpu).ok());
    ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, &bias.cuda, out.cuda).ok());
    EXPECT_LE(Error(out), kBf16OutTol) << "bias " << s.m << "x" << s.n << "x" << s.k;
    const Twin logits = Poisoned({s.m, s.n}, DType::kF32);
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, nullptr, logits.cpu).ok());
    ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, nullptr, logits.cuda).ok());
    EXPECT_LE(Error(logits), kF32GemmTol) << "f32 " << s.m << "x" << s.n << "x" << s.k;
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, &bias.cpu, logits.cpu).ok());
    ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, &bias.cuda, logits.cuda).ok());
    EXPECT_LE(Error(logits), kF32GemmTol) << "f32 bias " << s.m << "x" << s.n << "x" << s.k;
  }
  EXPECT_GT(cuda().gemm().num_plans(), 0u);
}

TEST_F(CudaOps, MatmulOnColumnSliceInput) {
  std::mt19937 rng(10);
  // x = columns [64, 128) of a [9, 192] matrix (GPT-2's fused qkv layout): lda = 192, and the
  // slice starts 128 bytes in (a smaller alignment than a fresh allocation).
  for (int64_t begin : {64, 8, 1}) {
    const Twin wide = Upload(RandomBf16(9 * 192, rng), {9, 192});
    const Twin x{wide.cpu.SliceLast(begin, begin + 64), wide.cuda.SliceLast(begin, begin + 64)};
    const Twin w = Upload(RandomBf16(48 * 64, rng), {48, 64});
    const Twin out = Poisoned({9, 48});
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, nullptr, out.cpu).ok());
    const absl::Status status = cuda().Matmul(x.cuda, w.cuda, nullptr, out.cuda);
    ASSERT_TRUE(status.ok()) << "begin " << begin << ": " << status;
    EXPECT_LE(Error(out), kBf16OutTol) << "begin " << begin;
  }
}

TEST_F(CudaOps, MatmulPlansAreReused) {
  std::mt19937 rng(11);
  const Twin x = Upload(RandomBf16(4 * 64, rng), {4, 64});
  const Twin w = Upload(RandomBf16(32 * 64, rng), {32, 64});
  const Twin out = Poisoned({4, 32});
  ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, nullptr, out.cuda).ok());
  const size_t plans = cuda().gemm().num_plans();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cuda().Matmul(x.cuda, w.cuda, nullptr, out.cuda).ok());
  EXPECT_EQ(cuda().gemm().num_plans(), plans);
}

// GEMM autotune (opt-in): the timed choice is still a correct GEMM, for the first m of a bucket
// (timed), another m of the same bucket (the winner reused after cuBLASLt's check), with the
// bias epilogue and f32 output, and inside a graph capture (no timing there: the heuristic).
TEST_F(CudaOps, MatmulWithAutotuneMatchesCpu) {
  // Without check_each_op: that mode refuses graph captures (it synchronises after every op).
  auto tuned = CudaBackend::Create(CudaBackendOptions{.device = 0, .gemm_autotune = true});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  std::mt19937 rng(12);
  const GemmShape shapes[] = {{1, 4096, 512}, {3, 4096, 512}, {128, 256, 512}, {100, 256, 512},
                              {7, 33, 65}};
  ASSERT_TRUE(cuda().Synchronize().ok());
  for (const GemmShape s : shapes) {
    const Twin x = Upload(RandomBf16(s.m * s.k, rng), {s.m, s.k});
    const Twin w = Upload(RandomBf16(s.n * s.k, rng, -0.2f, 0.2f), {s.n, s.k});
    const Twin bias = Upload(RandomBf16(s.n, rng), {s.n});
    const Twin out = Poisoned({s.m, s.n});
    const Twin logits = Poisoned({s.m, s.n}, DType::kF32);
    ASSERT_TRUE(cuda().Synchronize().ok());
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, &bias.cpu, out.cpu).ok());
    const absl::Status run = (*tuned)->Matmul(x.cuda, w.cuda, &bias.cuda, out.cuda);
    ASSERT_TRUE(run.ok()) << run;
    ASSERT_TRUE((*tuned)->Synchronize().ok());
    EXPECT_LE(Error(out), kBf16OutTol) << s.m << "x" << s.n << "x" << s.k;
    ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, nullptr, logits.cpu).ok());
    ASSERT_TRUE((*tuned)->Matmul(x.cuda, w.cuda, nullptr, logits.cuda).ok());
    ASSERT_TRUE((*tuned)->Synchronize().ok());
    EXPECT_LE(Error(logits), kF32GemmTol) << "f32 " << s.m << "x" << s.n << "x" << s.k;
  }
  // A shape first seen while capturing takes the heuristic's choice and still replays correctly.
  const Twin x = Upload(RandomBf16(5 * 96, rng), {5, 96});
  const Twin w = Upload(RandomBf16(40 * 96, rng), {40, 96});
  const Twin out = Poisoned({5, 40});
  ASSERT_TRUE(cuda().Synchronize().ok());
  ASSERT_TRUE(cpu().Matmul(x.cpu, w.cpu, nullptr, out.cpu).ok());
  ASSERT_TRUE((*tuned)->BeginCapture().ok());
  const absl::Status captured = (*tuned)->Matmul(x.cuda, w.cuda, nullptr, out.cuda);
  const absl::StatusOr<int64_t> graph = (*tuned)->EndCapture();
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE((*tuned)->Replay(*graph).ok());
  ASSERT_TRUE((*tuned)->Synchronize().ok());
  EXPECT_LE(Error(out), kBf16OutTol);
}

// W8A8 (opt-in fp8_w8a8): activations quantised per row and 128 columns, then cuBLASLt's FP8
// block-scaled GEMM. Against the same arithmetic on the host (kernels::QuantizeFp8Rows of the
// bf16 x, the weight decoded exactly, a double-accumulated GEMM) within bf16 output tolerance --
// a wrong scale layout is far off -- and against the W8A16 CPU reference within FP8's
// activation error; row counts not a multiple of 4 (padded inside), with and without a bias;
// with the heuristic's first algorithm, with the timed one (gemm_autotune), and with the weight
// scales once per row (fp8_w8a8_row_scales_rows: cuBLASLt's VEC128 mode for the weight; a
// wrong layout of those reads other blocks' scales, which differ here by powers of two); and
// with an f32 output, as an FP8 lm_head writes its logits.
TEST_F(CudaOps, MatmulFp8W8A8MatchesItsHostEmulation) {
  auto w8a8 = CudaBackend::Create(
      CudaBackendOptions{.device = 0, .check_each_op = true, .fp8_w8a8 = true});
  ASSERT_TRUE(w8a8.ok()) << w8a8.status();
  auto tuned = CudaBackend::Create(CudaBackendOptions{
      .device = 0, .check_each_op = true, .gemm_autotune = true, .fp8_w8a8 = true});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  auto per_row = CudaBackend::Create(CudaBackendOptions{
      .device = 0, .check_each_op = true, .fp8_w8a8 = true, .fp8_w8a8_row_scales_rows = 1024});
  ASSERT_TRUE(per_row.ok()) << per_row.status();
  ASSERT_TRUE((*per_row)->WantsFp8RowScales());
  std::mt19937 rng(21);
  const GemmShape shapes[] = {{9, 256, 512}, {64, 384, 1024}, {130, 256, 512}, {16, 128, 512}};
  for (const GemmShape s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k);
    // Magnitudes differ by powers of two between weight blocks and between activation (row,
    // group)s, so a scale read from the wrong place shows (exact in bf16: only exponents move).
    std::vector<float> x_host = RandomBf16(s.m * s.k, rng, -2, 2);
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t c = 0; c < s.k; ++c) x_host[r * s.k + c] *= std::ldexp(1.0f, (r + 2 * (c / 128)) % 5);
    }
    const Twin x = Upload(x_host, {s.m, s.k});
    std::vector<float> w_values(s.n * s.k);
    for (int64_t r = 0; r < s.n; ++r) {
      for (int64_t c = 0; c < s.k; ++c) {
        w_values[r * s.k + c] = std::uniform_real_distribution<float>(-0.2f, 0.2f)(rng) *
                                std::ldexp(1.0f, -((r / 128) * 3 + c / 128) % 7);
      }
    }
    const Fp8Blocks q = QuantizeFp8Blocks(w_values, s.n, s.k, 128);
    const int64_t scale_rows = (s.n + 127) / 128, scale_cols = s.k / 128;
    auto upload_u8 = [&](Backend& b, const std::vector<uint8_t>& host) {
      auto t = b.Allocate(DType::kU8, {s.n, s.k});
      EXPECT_TRUE(t.ok());
      EXPECT_TRUE(b.CopyFromHost(host.data(), t->view()).ok());
      return std::move(*t);
    };
    const Buffer codes_cuda = upload_u8(**w8a8, q.codes), codes_cpu = upload_u8(cpu(), q.codes);
    const Twin scales = Upload(q.scale_inv, {scale_rows, scale_cols}, DType::kF32);
    const Twin row_scales = Upload(Fp8RowScales(q.scale_inv, s.n, s.k, 128), {scale_cols, s.n},
                                   DType::kF32);
    const Twin bias = Upload(RandomBf16(s.n, rng), {s.n});
    // The device quantiser gives exactly the host reference's codes and scales (its scales
    // group-major with the rows padded to 4).
    {
      const Fp8Rows ref = QuantizeFp8Rows(x_host, s.m, s.k, 128);
      const int64_t stride = Fp8ActScaleStride(s.m);
      auto codes = cuda().Allocate(DType::kU8, {s.m, s.k});
      auto dev_scales = cuda().Allocate(DType::kF32, {scale_cols * stride});
      ASSERT_TRUE(codes.ok() && dev_scales.ok());
      ASSERT_EQ(LaunchQuantizeFp8Rows(x.cuda.data, s.k, s.m, s.k, codes->view().as<uint8_t>(),
                                      dev_scales->view().as<float>(), cuda().stream()),
                cudaSuccess);
      std::vector<uint8_t> got_codes(s.m * s.k);
      std::vector<float> got_scales(scale_cols * stride);
      ASSERT_TRUE(cuda().CopyToHost(codes->view(), got_codes.data()).ok());
      ASSERT_TRUE(cuda().CopyToHost(dev_scales->view(), got_scales.data()).ok());
      EXPECT_EQ(got_codes, ref.codes);
      for (int64_t r = 0; r < s.m; ++r) {
        for (int64_t g = 0; g < scale_cols; ++g) {
          ASSERT_EQ(got_scales[g * stride + r], ref.scales[r * scale_cols + g]) << r << "," << g;
        }
      }
    }
    for (const bool with_bias : {false, true})
    for (CudaBackend* backend : {w8a8->get(), tuned->get(), per_row->get()}) {
      SCOPED_TRACE(backend == tuned->get() ? "autotune"
                   : backend == per_row->get() ? "row scales" : "heuristic");
      const Twin out = Poisoned({s.m, s.n});
      ASSERT_TRUE(cuda().Synchronize().ok());
      Fp8Weight weight{.codes = codes_cuda.view(), .scales = scales.cuda, .block = 128};
      if (backend == per_row->get()) weight.row_scales = row_scales.cuda;
      const absl::Status run =
          backend->MatmulFp8(x.cuda, weight, with_bias ? &bias.cuda : nullptr, out.cuda);
      ASSERT_TRUE(run.ok()) << run;
      ASSERT_TRUE(backend->Synchronize().ok());
      // The host emulation.
      const Fp8Rows xq = QuantizeFp8Rows(x_host, s.m, s.k, 128);
      std::vector<float> w_dq(s.n * s.k);
      DequantizeFp8Blocks(q, s.n, s.k, 128, w_dq);
      const std::vector<float> bias_host = DownloadCpu(bias.cpu);
      std::vector<float> want(s.m * s.n);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double acc = with_bias ? bias_host[j] : 0.0;
          for (int64_t c = 0; c < s.k; ++c) {
            const double a = safetensors::F8E4M3ToFloat(xq.codes[i * s.k + c]) *
                             xq.scales[i * scale_cols + c / 128];
            acc += a * w_dq[j * s.k + c];
          }
          want[i * s.n + j] = static_cast<float>(acc);
        }
      }
      EXPECT_LE(RelativeError(DownloadCuda(out.cuda), want), kBf16OutTol);
      // An f32 output (an FP8 lm_head's logits): the same W8A8 GEMM without the bf16 rounding
      // (the W8A16 fallback would be the activations' FP8 rounding away).
      if (!with_bias) {
        const Twin logits = Poisoned({s.m, s.n}, DType::kF32);
        ASSERT_TRUE(cuda().Synchronize().ok());
        const absl::Status f32 = backend->MatmulFp8(x.cuda, weight, nullptr, logits.cuda);
        ASSERT_TRUE(f32.ok()) << f32;
        ASSERT_TRUE(backend->Synchronize().ok());
        EXPECT_LE(RelativeError(DownloadCuda(logits.cuda), want), kF32GemmTol) << "f32 output";
      }
      // The W8A16 reference: only the activations' FP8 rounding (3 mantissa bits) apart.
      ASSERT_TRUE(cpu().MatmulFp8(x.cpu, {codes_cpu.view(), scales.cpu, 128},
                                  with_bias ? &bias.cpu : nullptr, out.cpu)
                      .ok());
      EXPECT_LE(Error(out), 6e-2);
    }
    // The per-row scales are what that backend read: doubled, they double every output (exact:
    // a power of two).
    std::vector<float> doubled = Fp8RowScales(q.scale_inv, s.n, s.k, 128);
    for (float& v : doubled) v *= 2.0f;
    const Twin twice = Upload(doubled, {scale_cols, s.n}, DType::kF32);
    const Twin once_out = Poisoned({s.m, s.n}), twice_out = Poisoned({s.m, s.n});
    ASSERT_TRUE(cuda().Synchronize().ok());
    Fp8Weight weight{.codes = codes_cuda.view(), .scales = scales.cuda, .block = 128,
                     .row_scales = row_scales.cuda};
    ASSERT_TRUE((*per_row)->MatmulFp8(x.cuda, weight, nullptr, once_out.cuda).ok());
    weight.row_scales = twice.cuda;
    ASSERT_TRUE((*per_row)->MatmulFp8(x.cuda, weight, nullptr, twice_out.cuda).ok());
    ASSERT_TRUE((*per_row)->Synchronize().ok());
    const std::vector<float> once_values = DownloadCuda(once_out.cuda);
    const std::vector<float> twice_values = DownloadCuda(twice_out.cuda);
    for (size_t i = 0; i < once_values.size(); ++i) {
      ASSERT_EQ(twice_values[i], 2.0f * once_values[i]) << i;
    }
  }
}

// --profile-ops: each op's GPU time; a matmul's line names its weight shape and carries the
// weight bytes it streamed (the engine bench's GB/s column).
TEST_F(CudaOps, OpProfileNamesMatmulShapesWithTheirBytes) {
  auto profiled = CudaBackend::Create(CudaBackendOptions{.device = 0, .profile_ops = true});
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  std::mt19937 rng(13);
  const Twin x = Upload(RandomBf16(4 * 256, rng), {4, 256});
  const Twin w = Upload(RandomBf16(512 * 256, rng), {512, 256});
  const Twin out = Poisoned({4, 512});
  ASSERT_TRUE(cuda().Synchronize().ok());
  ASSERT_TRUE((*profiled)->HoldForProfile(100).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*profiled)->Matmul(x.cuda, w.cuda, nullptr, out.cuda).ok());
  }
  ASSERT_TRUE((*profiled)->Add(out.cuda, out.cuda, out.cuda).ok());
  auto ops = (*profiled)->TakeOpProfile();
  ASSERT_TRUE(ops.ok()) << ops.status();
  bool matmul = false, add = false;
  for (const OpTime& op : *ops) {
    if (op.op == "Matmul 512x256") {
      matmul = true;
      EXPECT_EQ(op.calls, 3);
      EXPECT_DOUBLE_EQ(op.bytes, 3.0 * 512 * 256 * 2);
      EXPECT_GT(op.total_ms, 0.0);
    }
    if (op.op == "Add") {
      add = true;
      EXPECT_EQ(op.calls, 1);
      EXPECT_EQ(op.bytes, 0.0);
    }
  }
  EXPECT_TRUE(matmul && add);
}

TEST_F(CudaOps, RopeOnStridedHeads) {
  std::mt19937 rng(12);
  for (int64_t head_dim : {16, 64, 128}) {
    const int64_t tokens = 11, heads = 3, max_pos = 64;
    const Twin table =
        Upload(RandomBf16(max_pos * head_dim, rng), {max_pos, head_dim}, DType::kF32);
    // q as a column slice of a [tokens, 2 * heads * head_dim] buffer.
    const Twin buf = Upload(RandomBf16(tokens * 2 * heads * head_dim, rng),
                            {tokens, 2 * heads * head_dim});
    const Twin x{buf.cpu.SliceLast(0, heads * head_dim).UnflattenLast(heads, head_dim),
                 buf.cuda.SliceLast(0, heads * head_dim).UnflattenLast(heads, head_dim)};
    std::vector<int32_t> pos(tokens);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % max_pos);
    const Twin pos_t = UploadI32(pos, {tokens});
    ASSERT_TRUE(cpu().Rope(x.cpu, pos_t.cpu, table.cpu).ok());
    ASSERT_TRUE(cuda().Rope(x.cuda, pos_t.cuda, table.cuda).ok());
    EXPECT_LE(Error(buf), kBf16OutTol) << head_dim;
  }
}

// AddRmsNormMatmul fused into the GEMV (fuse_norm_gemv) against AddRmsNorm in place and then
// Matmul / MatmulFp8 on a backend without it: the residual sum, the normalised rows and the
// output bit for bit. FP8 weights at one row (the fused GEMV; gpt-oss's hidden 2880 with a
// bias), and where the separate ops run: FP8 at 2 and 3 rows (the
// tensor-core one), bf16 weights (Qwen3-8B's qkv at one row; 16 rows: cuBLASLt), a hidden size
// of 96 (the norm kernel's warp form, which the GEMV does not repeat). Both backends launch with
// PDL, as the decode graphs do; the fused one's op profile tells which form ran.
TEST_F(CudaOps, AddRmsNormMatmulFusedEqualsTheSeparateOps) {
  auto two_ops = CudaBackend::Create(
      CudaBackendOptions{.device = 0, .pdl = true, .pdl_decode_kernels = true});
  auto fused = CudaBackend::Create(CudaBackendOptions{.device = 0,
                                                      .pdl = true,
                                                      .pdl_decode_kernels = true,
                                                      .fuse_norm_gemv = true,
                                                      .profile_ops = true});
  ASSERT_TRUE(two_ops.ok() && fused.ok());
  std::mt19937 rng(16);
  struct Case {
    int64_t rows, hidden, n;
    bool fp8, bias;
  };
  for (const Case c : {Case{1, 4096, 6144, false, false}, Case{1, 2880, 640, true, true},
                       Case{1, 4096, 1024, true, false}, Case{2, 4096, 512, true, true},
                       Case{3, 2048, 512, true, false}, Case{16, 4096, 256, false, false},
                       Case{1, 96, 64, false, false}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, hidden " << c.hidden << ", n " << c.n
                                      << (c.fp8 ? ", FP8" : "") << (c.bias ? ", bias" : ""));
    const int64_t h = c.hidden;
    const std::vector<float> x_values = RandomBf16(c.rows * h, rng);
    const std::vector<float> residual_values = RandomBf16(c.rows * h, rng, -4, 4);
    const Tensor norm_weight = Upload(RandomBf16(h, rng, 0.5f, 1.5f), {h}).cuda;
    const Tensor dense = Upload(RandomBf16(c.n * h, rng, -0.05f, 0.05f), {c.n, h}).cuda;
    Fp8Weight fp8;
    if (c.fp8) {
      std::vector<float> w_values(c.n * h);
      for (float& w : w_values) w = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
      const Fp8Blocks q = QuantizeFp8Blocks(w_values, c.n, h, 128);
      fp8.codes = Keep(cuda().Allocate(DType::kU8, {c.n, h}));
      ASSERT_TRUE(cuda().CopyFromHost(q.codes.data(), fp8.codes).ok());
      fp8.scales = Upload(q.scale_inv, {(c.n + 127) / 128, (h + 127) / 128}, DType::kF32).cuda;
      fp8.block = 128;
    }
    const Tensor bias_t = Upload(RandomBf16(c.n, rng), {c.n}).cuda;
    const Tensor* bias = c.bias ? &bias_t : nullptr;
    struct Result {
      std::vector<float> residual, normed, out;
    };
    const auto separate = [&](CudaBackend& b) {
      const Tensor x = Upload(x_values, {c.rows, h}).cuda;
      const Tensor residual = Upload(residual_values, {c.rows, h}).cuda;
      const Tensor normed = Poisoned({c.rows, h}).cuda, out = Poisoned({c.rows, c.n}).cuda;
      EXPECT_TRUE(cuda().Synchronize().ok());
      absl::Status st = b.AddRmsNorm(x, residual, norm_weight, 1e-6f, normed);
      if (st.ok()) {
        st = c.fp8 ? b.MatmulFp8(normed, fp8, bias, out) : b.Matmul(normed, dense, bias, out);
      }
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_TRUE(b.Synchronize().ok());
      return Result{DownloadCuda(residual), DownloadCuda(normed), DownloadCuda(out)};
    };
    const auto one_op = [&](CudaBackend& b) {
      const PreNorm norm{.x = Upload(x_values, {c.rows, h}).cuda,
                         .residual = Upload(residual_values, {c.rows, h}).cuda,
                         .residual_out = Poisoned({c.rows, h}).cuda,
                         .weight = norm_weight,
                         .eps = 1e-6f,
                         .normed = Poisoned({c.rows, h}).cuda};
      const Tensor out = Poisoned({c.rows, c.n}).cuda;
      EXPECT_TRUE(cuda().Synchronize().ok());
      const MatmulWeight w = c.fp8 ? MatmulWeight{.fp8 = &fp8} : MatmulWeight{.dense = &dense};
      // The op profile times what runs between two holds (the second collects it).
      EXPECT_TRUE(b.HoldForProfile(10).ok());
      const absl::Status st = b.AddRmsNormMatmul(norm, w, bias, out);
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_TRUE(b.HoldForProfile(10).ok());
      EXPECT_TRUE(b.Synchronize().ok());
      EXPECT_EQ(DownloadCuda(norm.residual), residual_values);  // only read
      return Result{DownloadCuda(norm.residual_out), DownloadCuda(norm.normed),
                    DownloadCuda(out)};
    };
    const Result want = separate(**two_ops), got = one_op(**fused);
    const auto profile = (*fused)->TakeOpProfile();
    ASSERT_TRUE(profile.ok()) << profile.status();
    bool one_kernel = false;
    for (const OpTime& op : *profile) one_kernel |= op.op.rfind("AddRmsNormMatmul", 0) == 0;
    EXPECT_EQ(one_kernel, c.fp8 && c.rows == 1 && h > 512);
    EXPECT_TRUE(SameBits(want.residual, got.residual));
    EXPECT_TRUE(SameBits(want.normed, got.normed));
    EXPECT_TRUE(SameBits(want.out, got.out));
    EXPECT_FALSE(std::isnan(got.out[0]));
  }
  // No written operand may overlap x or residual (every CTA reads them while one writes), nor
  // another written one; a weight is required; x of rank 3 is refused before any launch.
  const Tensor rows = Upload(RandomBf16(4096, rng), {1, 4096}).cuda;
  const Tensor w = Upload(RandomBf16(4096, rng), {4096}).cuda;
  const Tensor wm = Upload(RandomBf16(64 * 4096, rng), {64, 4096}).cuda;
  const Tensor out = Poisoned({1, 64}).cuda;
  const PreNorm ok{.x = Poisoned({1, 4096}).cuda, .residual = rows,
                   .residual_out = Poisoned({1, 4096}).cuda, .weight = w,
                   .normed = Poisoned({1, 4096}).cuda};
  PreNorm in_place = ok, normed_is_x = ok, normed_is_sum = ok;
  in_place.residual_out = rows;
  normed_is_x.normed = ok.x;
  normed_is_sum.normed = ok.residual_out;
  for (const PreNorm* bad : {&in_place, &normed_is_x, &normed_is_sum}) {
    EXPECT_EQ((*fused)->AddRmsNormMatmul(*bad, MatmulWeight{.dense = &wm}, nullptr, out).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*fused)->AddRmsNormMatmul(ok, MatmulWeight{}, nullptr, out).code(),
            absl::StatusCode::kInvalidArgument);
  PreNorm rank3 = ok;
  rank3.x = ok.x.UnflattenLast(32, 128);
  rank3.residual = rows.UnflattenLast(32, 128);
  rank3.residual_out = ok.residual_out.UnflattenLast(32, 128);
  rank3.normed = ok.normed.UnflattenLast(32, 128);
  EXPECT_EQ((*fused)->AddRmsNormMatmul(rank3, MatmulWeight{.dense = &wm}, nullptr, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::isnan(DownloadCuda(ok.residual_out)[0]));  // nothing launched
  ASSERT_TRUE((*fused)->TakeOpProfile().ok());
}

// AddRmsNormMatmul on the W8A8 GEMM with the norm writing the activation codes
// (fuse_norm_quant) against AddRmsNorm in place and then MatmulFp8 (W8A8, the quantiser kernel):
// residual sum, normalised rows and output bit for bit, at hidden sizes of 1, 2 and 3 vectors a
// thread, row counts padded and not padded to 4, with and without a bias; the op profile shows
// one norm, the W8A8 GEMM, and neither the quantiser nor the weight decoder.
TEST_F(CudaOps, AddRmsNormMatmulQuantFusedEqualsTheSeparateOps) {
  auto two_ops = CudaBackend::Create(CudaBackendOptions{
      .device = 0, .pdl = true, .pdl_decode_kernels = true, .fp8_w8a8 = true});
  auto fused = CudaBackend::Create(CudaBackendOptions{.device = 0,
                                                      .pdl = true,
                                                      .pdl_decode_kernels = true,
                                                      .fuse_norm_quant = true,
                                                      .fp8_w8a8 = true,
                                                      .profile_ops = true});
  ASSERT_TRUE(two_ops.ok() && fused.ok());
  std::mt19937 rng(18);
  const int64_t n = 512;
  for (const int64_t h : {int64_t{2048}, int64_t{4096}, int64_t{5120}}) {
    std::vector<float> w_values(n * h);
    for (float& v : w_values) v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    const Fp8Blocks q = QuantizeFp8Blocks(w_values, n, h, 128);
    Fp8Weight fp8{.codes = Keep(cuda().Allocate(DType::kU8, {n, h})),
                  .scales = Upload(q.scale_inv, {n / 128, h / 128}, DType::kF32).cuda,
                  .block = 128};
    ASSERT_TRUE(cuda().CopyFromHost(q.codes.data(), fp8.codes).ok());
    const Tensor norm_weight = Upload(RandomBf16(h, rng, 0.5f, 1.5f), {h}).cuda;
    const Tensor bias_t = Upload(RandomBf16(n, rng), {n}).cuda;
    for (const int64_t rows : {int64_t{9}, int64_t{64}}) {
      const Tensor* bias = rows == 9 ? &bias_t : nullptr;
      SCOPED_TRACE(::testing::Message() << "hidden " << h << ", " << rows << " rows");
      const std::vector<float> x_values = RandomBf16(rows * h, rng);
      const std::vector<float> residual_values = RandomBf16(rows * h, rng, -4, 4);
      std::vector<float> want_residual, want_normed, want_out;
      {
        const Tensor x = Upload(x_values, {rows, h}).cuda;
        const Tensor residual = Upload(residual_values, {rows, h}).cuda;
        const Tensor normed = Poisoned({rows, h}).cuda, out = Poisoned({rows, n}).cuda;
        EXPECT_TRUE(cuda().Synchronize().ok());
        ASSERT_TRUE((*two_ops)->AddRmsNorm(x, residual, norm_weight, 1e-6f, normed).ok());
        ASSERT_TRUE((*two_ops)->MatmulFp8(normed, fp8, bias, out).ok());
        ASSERT_TRUE((*two_ops)->Synchronize().ok());
        want_residual = DownloadCuda(residual);
        want_normed = DownloadCuda(normed);
        want_out = DownloadCuda(out);
      }
      const PreNorm norm{.x = Upload(x_values, {rows, h}).cuda,
                         .residual = Upload(residual_values, {rows, h}).cuda,
                         .residual_out = Poisoned({rows, h}).cuda,
                         .weight = norm_weight,
                         .eps = 1e-6f,
                         .normed = Poisoned({rows, h}).cuda};
      const Tensor out = Poisoned({rows, n}).cuda;
      EXPECT_TRUE(cuda().Synchronize().ok());
      EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
      const absl::Status st =
          (*fused)->AddRmsNormMatmul(norm, MatmulWeight{.fp8 = &fp8}, bias, out);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
      const auto profile = (*fused)->TakeOpProfile();
      ASSERT_TRUE(profile.ok()) << profile.status();
      int64_t norms = 0;
      bool gemm = false, quantiser = false, decoder = false;
      for (const OpTime& op : *profile) {
        if (op.op == "AddRmsNorm") norms += op.calls;
        gemm |= op.op.rfind("MatmulFp8 ", 0) == 0;
        quantiser |= op.op == "QuantizeFp8Rows";
        decoder |= op.op == "DequantizeFp8";
      }
      EXPECT_EQ(norms, 1);
      EXPECT_TRUE(gemm);
      EXPECT_FALSE(quantiser);
      EXPECT_FALSE(decoder);
      EXPECT_EQ(DownloadCuda(norm.residual), residual_values);  // only read
      EXPECT_TRUE(SameBits(want_residual, DownloadCuda(norm.residual_out)));
      EXPECT_TRUE(SameBits(want_normed, DownloadCuda(norm.normed)));
      const std::vector<float> got_out = DownloadCuda(out);
      EXPECT_TRUE(SameBits(want_out, got_out));
      EXPECT_FALSE(std::isnan(got_out[0]));
    }
  }
}

// SiluMulMatmulFp8 with the activation kernel writing the W8A8 codes (fuse_silu_quant) against
// SiluMul and then MatmulFp8 (W8A8, the quantiser kernel): act (written over the gate half, as
// the models do) and the output bit for bit, rows padded and not padded to 4, gate and up as
// column slices of one gate_up buffer and as odd-aligned (not 8-byte) slices; the op profile
// shows one SiluMul, the GEMM and no quantiser. 8 rows (the decode GEMVs' count) with such
// slices, which the GEMVs refuse, go to the W8A8 GEMM too; bad shapes are refused before any
// launch.
TEST_F(CudaOps, SiluMulMatmulFp8QuantFusedEqualsTheSeparateOps) {
  auto two_ops = CudaBackend::Create(CudaBackendOptions{
      .device = 0, .pdl = true, .pdl_decode_kernels = true, .fp8_w8a8 = true});
  auto fused = CudaBackend::Create(CudaBackendOptions{.device = 0,
                                                      .pdl = true,
                                                      .pdl_decode_kernels = true,
                                                      .fuse_silu_quant = true,
                                                      .fp8_w8a8 = true,
                                                      .profile_ops = true});
  ASSERT_TRUE(two_ops.ok() && fused.ok());
  std::mt19937 rng(19);
  const int64_t n = 512, inter = 1536;
  std::vector<float> w_values(n * inter);
  for (float& v : w_values) v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
  const Fp8Blocks q = QuantizeFp8Blocks(w_values, n, inter, 128);
  Fp8Weight fp8{.codes = Keep(cuda().Allocate(DType::kU8, {n, inter})),
                .scales = Upload(q.scale_inv, {n / 128, inter / 128}, DType::kF32).cuda,
                .block = 128};
  ASSERT_TRUE(cuda().CopyFromHost(q.codes.data(), fp8.codes).ok());
  for (const int64_t rows : {int64_t{8}, int64_t{9}, int64_t{64}}) {
    for (const int64_t offset : {int64_t{0}, int64_t{1}}) {  // 1: 2-byte aligned slices
      SCOPED_TRACE(::testing::Message() << rows << " rows, offset " << offset);
      const int64_t width = 2 * inter + 4;  // offset 0: 8-byte rows (the vector kernel)
      const std::vector<float> gate_up = RandomBf16(rows * width, rng, -6, 6);
      const auto slices = [&](const Tensor& all) {
        return std::pair{all.SliceLast(offset, offset + inter),
                         all.SliceLast(offset + inter, offset + 2 * inter)};
      };
      std::vector<float> want_act, want_out;
      {
        const Tensor all = Upload(gate_up, {rows, width}).cuda;
        const auto [gate, up] = slices(all);
        const Tensor out = Poisoned({rows, n}).cuda;
        EXPECT_TRUE(cuda().Synchronize().ok());
        ASSERT_TRUE((*two_ops)->SiluMul(gate, up, gate).ok());
        ASSERT_TRUE((*two_ops)->MatmulFp8(gate, fp8, nullptr, out).ok());
        ASSERT_TRUE((*two_ops)->Synchronize().ok());
        want_act = DownloadCuda(all);
        want_out = DownloadCuda(out);
      }
      const Tensor all = Upload(gate_up, {rows, width}).cuda;
      const auto [gate, up] = slices(all);
      const Tensor out = Poisoned({rows, n}).cuda;
      EXPECT_TRUE(cuda().Synchronize().ok());
      EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
      const absl::Status st = (*fused)->SiluMulMatmulFp8(gate, up, gate, fp8, out);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
      const auto profile = (*fused)->TakeOpProfile();
      ASSERT_TRUE(profile.ok()) << profile.status();
      int64_t silu = 0;
      bool gemm = false, quantiser = false;
      for (const OpTime& op : *profile) {
        if (op.op == "SiluMul") silu += op.calls;
        gemm |= op.op.rfind("MatmulFp8 ", 0) == 0;
        quantiser |= op.op == "QuantizeFp8Rows";
      }
      EXPECT_EQ(silu, 1);
      EXPECT_TRUE(gemm);
      EXPECT_EQ(quantiser, false);
      EXPECT_TRUE(SameBits(want_act, DownloadCuda(all)));
      const std::vector<float> got_out = DownloadCuda(out);
      EXPECT_TRUE(SameBits(want_out, got_out));
      EXPECT_FALSE(std::isnan(got_out[0]));
    }
  }
  // Bad input: up of another shape, an output of the wrong width; nothing launched.
  const Tensor all = Upload(RandomBf16(16 * 2 * inter, rng), {16, 2 * inter}).cuda;
  const Tensor gate = all.SliceLast(0, inter);
  const Tensor out = Poisoned({16, n}).cuda;
  EXPECT_EQ((*fused)->SiluMulMatmulFp8(gate, all.SliceLast(inter, 2 * inter - 128), gate, fp8,
                                       out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*fused)->SiluMulMatmulFp8(gate, all.SliceLast(inter, 2 * inter), gate, fp8,
                                       Poisoned({16, n + 16}).cuda).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::isnan(DownloadCuda(out)[0]));
  ASSERT_TRUE((*fused)->TakeOpProfile().ok());
}

// GatedMlpRowFp8 (fused_mlp_row: one kernel, down transposed) against the ops it replaces
// (AddRmsNormMatmul or MatmulFp8 into gate_up, SiluMul, MatmulFp8 of down): the output within a
// bf16 rounding, the pre-norm's sum and normalised row bit for bit, one kernel in the profile.
// Two rows and a backend without the option are Unimplemented, a mismatched down is refused;
// neither launches anything.
TEST_F(CudaOps, GatedMlpRowFp8MatchesTheSeparateOps) {
  auto fused = CudaBackend::Create(CudaBackendOptions{.device = 0,
                                                      .pdl = true,
                                                      .pdl_decode_kernels = true,
                                                      .fuse_norm_gemv = true,
                                                      .fused_mlp_row = true,
                                                      .profile_ops = true});
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::mt19937 rng(23);
  const int64_t hidden = 1024, inter = 3072;
  const auto fp8_of = [&](int64_t rows, int64_t cols, bool transpose) {
    std::vector<float> values(rows * cols);
    for (float& v : values) v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    Fp8Blocks q = QuantizeFp8Blocks(values, rows, cols, 128);
    if (transpose) {  // [cols, rows]: the codes and their block scales
      q = TransposeFp8Blocks(q.codes, q.scale_inv, rows, cols, 128);
      std::swap(rows, cols);
    }
    Fp8Weight w{.codes = Keep(cuda().Allocate(DType::kU8, {rows, cols})),
                .scales = Upload(q.scale_inv, {rows / 128, cols / 128}, DType::kF32).cuda,
                .block = 128};
    EXPECT_TRUE(cuda().CopyFromHost(q.codes.data(), w.codes).ok());
    return std::pair{w, q};
  };
  const auto [gate_up, gate_up_q] = fp8_of(2 * inter, hidden, false);
  std::mt19937 down_rng = rng;  // the same values twice: down, then down transposed
  const auto [down, down_q] = fp8_of(hidden, inter, false);
  rng = down_rng;
  const auto [down_t, down_t_q] = fp8_of(hidden, inter, true);
  const std::vector<float> x = RandomBf16(hidden, rng, -2, 2);
  const std::vector<float> residual = RandomBf16(hidden, rng, -2, 2);
  const Tensor norm_weight = Upload(RandomBf16(hidden, rng, 0.5f, 1.5f), {hidden}).cuda;
  for (const bool with_norm : {false, true}) {
    SCOPED_TRACE(with_norm ? "with the pre-norm" : "normed x");
    // Fresh operands per run: the pre-norm writes residual_out and normed.
    struct Operands {
      Tensor x, residual, residual_out, normed, out;
      PreNorm norm;
    };
    const auto operands = [&](const Tensor& weight) {
      Operands o{.x = Upload(x, {1, hidden}).cuda,
                 .residual = Upload(residual, {1, hidden}).cuda,
                 .residual_out = Poisoned({1, hidden}).cuda,
                 .normed = Upload(x, {1, hidden}).cuda,  // x itself without the pre-norm
                 .out = Poisoned({1, hidden}).cuda};
      o.norm = PreNorm{.x = o.x, .residual = o.residual, .residual_out = o.residual_out,
                       .weight = weight, .eps = 1e-6f, .normed = o.normed};
      if (with_norm) UploadCuda(std::vector<float>(hidden, NAN), o.normed);
      return o;
    };
    const Operands want = operands(norm_weight);
    const Tensor gate_up_out = Poisoned({1, 2 * inter}).cuda;
    const Tensor gate = gate_up_out.SliceLast(0, inter), up = gate_up_out.SliceLast(inter, 2 * inter);
    if (with_norm) {
      ASSERT_TRUE(cuda().AddRmsNormMatmul(want.norm, MatmulWeight{.fp8 = &gate_up}, nullptr,
                                          gate_up_out).ok());
    } else {
      ASSERT_TRUE(cuda().MatmulFp8(want.normed, gate_up, nullptr, gate_up_out).ok());
    }
    ASSERT_TRUE(cuda().SiluMul(gate, up, gate).ok());
    ASSERT_TRUE(cuda().MatmulFp8(gate, down, nullptr, want.out).ok());
    ASSERT_TRUE(cuda().Synchronize().ok());

    const Operands got = operands(norm_weight);
    EXPECT_TRUE(cuda().Synchronize().ok());
    EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
    const absl::Status st = (*fused)->GatedMlpRowFp8(with_norm ? &got.norm : nullptr, got.normed,
                                                     gate_up, down_t, got.out);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE((*fused)->HoldForProfile(10).ok());
    const auto profile = (*fused)->TakeOpProfile();
    ASSERT_TRUE(profile.ok()) << profile.status();
    int64_t kernels = 0, mlp = 0;
    for (const OpTime& op : *profile) {
      if (op.op == "HoldForProfile") continue;
      kernels += op.calls;
      if (op.op.rfind("GatedMlpRowFp8 ", 0) == 0) mlp += op.calls;
    }
    EXPECT_EQ(mlp, 1);
    EXPECT_EQ(kernels, 1);
    const std::vector<float> want_out = DownloadCuda(want.out), got_out = DownloadCuda(got.out);
    EXPECT_LT(RelativeError(got_out, want_out), 8e-3);
    EXPECT_GT(*std::max_element(want_out.begin(), want_out.end()), 0.0f);  // not trivial
    if (with_norm) {
      EXPECT_TRUE(SameBits(DownloadCuda(want.normed), DownloadCuda(got.normed)));
      EXPECT_TRUE(SameBits(DownloadCuda(want.residual_out), DownloadCuda(got.residual_out)));
    }
    // In place, as the models run it: out is the pre-norm's x (the attention block's output),
    // or x itself.
    const Operands in_place = operands(norm_weight);
    const Tensor& aliased = with_norm ? in_place.x : in_place.normed;
    ASSERT_TRUE((*fused)->GatedMlpRowFp8(with_norm ? &in_place.norm : nullptr, in_place.normed,
                                         gate_up, down_t, aliased).ok());
    ASSERT_TRUE((*fused)->Synchronize().ok());  // its own stream
    ASSERT_TRUE((*fused)->TakeOpProfile().ok());  // the next pass counts its own ops
    EXPECT_LT(RelativeError(DownloadCuda(aliased), want_out), 8e-3);
  }
  // Refused, nothing launched: two rows and a backend without the option (Unimplemented: the
  // caller runs the ops), down of the wrong width (InvalidArgument).
  const Tensor two_rows = Upload(RandomBf16(2 * hidden, rng), {2, hidden}).cuda;
  const Tensor out2 = Poisoned({2, hidden}).cuda, out1 = Poisoned({1, hidden}).cuda;
  const Tensor one_row = Upload(x, {1, hidden}).cuda;
  EXPECT_EQ((*fused)->GatedMlpRowFp8(nullptr, two_rows, gate_up, down_t, out2).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(cuda().GatedMlpRowFp8(nullptr, one_row, gate_up, down_t, out1).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*fused)->GatedMlpRowFp8(nullptr, one_row, gate_up, down, out1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::isnan(DownloadCuda(out1)[0]));
  EXPECT_TRUE(std::isnan(DownloadCuda(out2)[0]));
  EXPECT_FALSE(cuda().WantsFp8DownTransposed(4096, 12288, 128));  // the option off
  EXPECT_TRUE((*fused)->WantsFp8DownTransposed(4096, 12288, 128));
  EXPECT_FALSE((*fused)->WantsFp8DownTransposed(1024, 3072, 128));  // < 2 units per SM
  ASSERT_TRUE((*fused)->TakeOpProfile().ok());
}

// The norm kernel's FP8 codes and scales (NormArgs::fp8_codes) against the quantiser run on its
// bf16 output, byte for byte: 640 columns (a warp's two half warps in different states at the
// row's end), 4096, rows with a NaN, an infinity and an all-zero group, and the scale layout
// padded to 4 rows; codes or scales misaligned, or a stride below the rows, are refused.
TEST_F(CudaOps, RmsNormFp8CodesEqualTheQuantiser) {
  std::mt19937 rng(19);
  for (const int64_t cols : {int64_t{640}, int64_t{4096}}) {
    const int64_t rows = 5, groups = cols / 128, stride = Fp8ActScaleStride(rows);
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    std::vector<float> x_values = RandomBf16(rows * cols, rng, -3, 3);
    x_values[1 * cols + 7] = NAN;
    x_values[2 * cols + 130] = INFINITY;
    for (int64_t c = 128; c < 256; ++c) x_values[3 * cols + c] = 0.0f;
    std::vector<float> weight_values = RandomBf16(cols, rng, 0.5f, 1.5f);
    const Tensor x = Upload(x_values, {rows, cols}).cuda;
    const Tensor weight = Upload(weight_values, {cols}).cuda;
    const Tensor normed = Poisoned({rows, cols}).cuda;
    const Tensor codes = Keep(cuda().Allocate(DType::kU8, {rows, cols}));
    const Tensor scales = Keep(cuda().Allocate(DType::kF32, {groups * stride}));
    const Tensor want_codes = Keep(cuda().Allocate(DType::kU8, {rows, cols}));
    const Tensor want_scales = Keep(cuda().Allocate(DType::kF32, {groups * stride}));
    ASSERT_TRUE(cuda().Zero(scales).ok() && cuda().Zero(want_scales).ok());
    NormArgs args{.x = AsRows(x), .out = AsRows(normed), .weight = weight.data};
    args.fp8_codes = codes.as<uint8_t>();
    args.fp8_scales = scales.as<float>();
    args.fp8_scale_stride = stride;
    ASSERT_EQ(LaunchRmsNorm(args, cuda().stream()), cudaSuccess);
    ASSERT_EQ(LaunchQuantizeFp8Rows(normed.data, cols, rows, cols, want_codes.as<uint8_t>(),
                                    want_scales.as<float>(), cuda().stream()),
              cudaSuccess);
    ASSERT_TRUE(cuda().Synchronize().ok());
    std::vector<uint8_t> got_c(rows * cols), want_c(rows * cols);
    std::vector<float> got_s(groups * stride), want_s(groups * stride);
    ASSERT_TRUE(cuda().CopyToHost(codes, got_c.data()).ok());
    ASSERT_TRUE(cuda().CopyToHost(want_codes, want_c.data()).ok());
    ASSERT_TRUE(cuda().CopyToHost(scales, got_s.data()).ok());
    ASSERT_TRUE(cuda().CopyToHost(want_scales, want_s.data()).ok());
    EXPECT_EQ(got_c, want_c);
    EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), got_s.size() * 4), 0);
    EXPECT_EQ(got_s[1 * stride + 3], 1.0f);  // the all-zero group of row 3
    NormArgs bad = args;
    bad.fp8_scale_stride = rows - 1;
    EXPECT_EQ(LaunchRmsNorm(bad, cuda().stream()), cudaErrorInvalidValue);
    bad = args;
    bad.fp8_codes = codes.as<uint8_t>() + 4;
    EXPECT_EQ(LaunchRmsNorm(bad, cuda().stream()), cudaErrorInvalidValue);
  }
}

// The GEMV's norm prologue without a residual (GemvNorm::residual null: RmsNorm(x) * weight) at
// the kernel level, against the norm kernel and then the GEMV: normed and output bit for bit.
TEST_F(CudaOps, GemvNormPrologueWithoutResidualEqualsTheNormKernel) {
  std::mt19937 rng(17);
  const int64_t n = 512, k = 4096;
  const Tensor x = Upload(RandomBf16(k, rng, -3, 3), {1, k}).cuda;
  const Tensor weight = Upload(RandomBf16(k, rng, 0.5f, 1.5f), {k}).cuda;
  std::vector<float> w_values(n * k);
  for (float& v : w_values) v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
  const Fp8Blocks q = QuantizeFp8Blocks(w_values, n, k, 128);
  const Tensor codes = Keep(cuda().Allocate(DType::kU8, {n, k}));
  ASSERT_TRUE(cuda().CopyFromHost(q.codes.data(), codes).ok());
  const Tensor scales = Upload(q.scale_inv, {n / 128, k / 128}, DType::kF32).cuda;
  const Tensor normed_ref = Poisoned({1, k}).cuda, out_ref = Poisoned({1, n}).cuda;
  const Tensor normed = Poisoned({1, k}).cuda, out = Poisoned({1, n}).cuda;
  ASSERT_TRUE(cuda().Synchronize().ok());
  const NormArgs norm{.x = AsRows(x), .out = AsRows(normed_ref), .weight = weight.data};
  ASSERT_EQ(LaunchRmsNorm(norm, cuda().stream()), cudaSuccess);
  GemvArgs gemv{.x = normed_ref.data, .ldx = k, .w = codes.data, .ldw = k, .out = out_ref.data,
                .ldo = n, .m = 1, .n = static_cast<int>(n), .k = static_cast<int>(k),
                .scales = scales.as<float>(), .scale_cols = k / 128, .block = 128};
  ASSERT_EQ(LaunchGemv(gemv, cuda().stream()), cudaSuccess);
  gemv.x = x.data;
  gemv.out = out.data;
  gemv.norm = GemvNorm{.normed = normed.data, .ld_normed = k, .weight = weight.data};
  ASSERT_TRUE(GemvSupports(gemv));
  ASSERT_EQ(LaunchGemv(gemv, cuda().stream()), cudaSuccess);
  ASSERT_TRUE(cuda().Synchronize().ok());
  const std::vector<float> want_normed = DownloadCuda(normed_ref);
  const std::vector<float> got_normed = DownloadCuda(normed);
  const std::vector<float> want_out = DownloadCuda(out_ref), got_out = DownloadCuda(out);
  EXPECT_EQ(std::memcmp(want_normed.data(), got_normed.data(), k * 4), 0);
  EXPECT_EQ(std::memcmp(want_out.data(), got_out.data(), n * 4), 0);
  EXPECT_FALSE(std::isnan(got_out[0]));
  // A norm the kernel does not take (bf16 weights) is refused, not run as a plain GEMV.
  GemvArgs bf16 = gemv;
  bf16.scales = nullptr;
  bf16.block = 0;
  EXPECT_FALSE(GemvSupports(bf16));
  EXPECT_EQ(LaunchGemv(bf16, cuda().stream()), cudaErrorInvalidValue);
}

TEST_F(CudaOps, RejectsWrongDtypesAndShapes) {
  const Tensor f32 = Keep(cuda().Allocate(DType::kF32, {4, 8}));
  const Tensor bf = Keep(cuda().Allocate(DType::kBF16, {4, 8}));
  const Tensor w = Keep(cuda().Allocate(DType::kBF16, {8}));
  EXPECT_EQ(cuda().RmsNorm(f32, w, 1e-6f, f32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda().Add(bf, bf, f32).code(), absl::StatusCode::kInvalidArgument);
  const Tensor w_bad = Keep(cuda().Allocate(DType::kBF16, {3, 5}));
  EXPECT_EQ(cuda().Matmul(bf, w_bad, nullptr, bf).code(), absl::StatusCode::kInvalidArgument);
  const Tensor host = Keep(cpu().Allocate(DType::kBF16, {4, 8}));
  EXPECT_EQ(cuda().Add(bf, host, bf).code(), absl::StatusCode::kInvalidArgument);
  ExpertWeights mx;  // MXFP4 format without its tensors
  mx.format = ExpertWeights::Format::kMxfp4;
  EXPECT_EQ(cuda().Experts(bf, bf, f32, mx, GluParams{}, bf).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
