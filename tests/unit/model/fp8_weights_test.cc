// FP8 block-scaled checkpoints (Qwen3-8B-FP8 layout): WeightLoader dequantises X[i, j] *
// X_scale_inv[i / b0, j / b1] exactly (the CPU backend keeps f32), for whole tensors and for the
// row, column and multi-range slices tensor parallelism takes, and records bad scale tensors.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "common/safetensors/writer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/model/tensor_parallel.h"
#include "worker/model/weight_loader.h"

namespace xserv::model {
namespace {

constexpr int64_t kRows = 40, kCols = 70, kB0 = 16, kB1 = 32;  // partial last blocks both ways
constexpr int64_t kS0 = (kRows + kB0 - 1) / kB0, kS1 = (kCols + kB1 - 1) / kB1;

struct Fp8Checkpoint {
  std::string dir;
  std::vector<float> dequantised;  // [kRows, kCols], computed here from the stored bytes
};

// w.weight (F8_E4M3, finite codes only) with BF16 block scales, plus `extra` tensors.
Fp8Checkpoint Write(const std::string& name, std::vector<safetensors::TensorView> extra = {}) {
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(kRows * kCols);
  for (uint8_t& c : codes) {
    do c = static_cast<uint8_t>(rng()); while ((c & 0x7F) == 0x7F);  // 0x7F / 0xFF are NaN
  }
  std::vector<uint16_t> scales(kS0 * kS1);
  for (uint16_t& s : scales) {
    s = safetensors::FloatToBf16(std::ldexp(1.0f + (rng() % 128) / 128.0f,
                                            -static_cast<int>(rng() % 12)));
  }
  Fp8Checkpoint out;
  out.dir = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::filesystem::create_directories(out.dir);
  std::vector<safetensors::TensorView> tensors = {
      {.name = "w.weight", .dtype = safetensors::DType::kF8E4M3, .shape = {kRows, kCols},
       .data = std::as_bytes(std::span(codes))},
      {.name = "w.weight_scale_inv", .dtype = safetensors::DType::kBF16, .shape = {kS0, kS1},
       .data = std::as_bytes(std::span(scales))}};
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  EXPECT_TRUE(safetensors::WriteSafetensors(out.dir + "/model.safetensors", tensors).ok());
  out.dequantised.resize(codes.size());
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      out.dequantised[i * kCols + j] = safetensors::F8E4M3ToFloat(codes[i * kCols + j]) *
                                       safetensors::Bf16ToFloat(scales[(i / kB0) * kS1 + j / kB1]);
    }
  }
  return out;
}

std::vector<float> ToHost(kernels::Backend& backend, const kernels::Buffer& buffer) {
  std::vector<float> host(static_cast<size_t>(buffer.view().numel()));
  EXPECT_TRUE(backend.CopyToHost(buffer.view(), host.data()).ok());
  return host;
}

TEST(Fp8Weights, WholeTensorAndSlicesAreExact) {
  const Fp8Checkpoint ckpt = Write("fp8_exact");
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ckpt.dir, backend);
  ASSERT_TRUE(loader.ok()) << loader.status();
  loader->set_fp8_block_size({kB0, kB1});
  EXPECT_EQ(ToHost(backend, loader->Take("w.weight", {kRows, kCols})), ckpt.dequantised);

  // Rows 3..20 and 33..40 (crossing block edges), as a fused column-parallel shard takes them.
  const TensorSlice rows{.dim = 0, .ranges = {{3, 20}, {33, 40}}};
  const std::vector<float> got_rows = ToHost(backend, loader->Take("w.weight", {kRows, kCols}, rows));
  ASSERT_EQ(got_rows.size(), static_cast<size_t>((17 + 7) * kCols));
  size_t at = 0;
  for (const auto& r : rows.ranges) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      for (int64_t j = 0; j < kCols; ++j) {
        ASSERT_EQ(got_rows[at++], ckpt.dequantised[i * kCols + j]) << i << "," << j;
      }
    }
  }
  // Columns 31..65, as a row-parallel shard takes them.
  const TensorSlice cols{.dim = 1, .ranges = {{31, 65}}};
  const std::vector<float> got_cols = ToHost(backend, loader->Take("w.weight", {kRows, kCols}, cols));
  ASSERT_EQ(got_cols.size(), static_cast<size_t>(kRows * 34));
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < 34; ++j) {
      ASSERT_EQ(got_cols[i * 34 + j], ckpt.dequantised[i * kCols + 31 + j]) << i << "," << j;
    }
  }
  EXPECT_TRUE(loader->Finish().ok()) << loader->Finish();  // the scales count as used
}

TEST(Fp8Weights, OneScalePerTensorWithoutBlockSize) {
  std::vector<uint8_t> codes = {0x38, 0xB8, 0x40, 0x01};  // 1, -1, 2, smallest subnormal
  const uint16_t scale = safetensors::FloatToBf16(0.75f);
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "fp8_tensor").string();
  std::filesystem::create_directories(dir);
  const std::vector<safetensors::TensorView> tensors = {
      {.name = "w.weight", .dtype = safetensors::DType::kF8E4M3, .shape = {2, 2},
       .data = std::as_bytes(std::span(codes))},
      {.name = "w.weight_scale_inv", .dtype = safetensors::DType::kBF16, .shape = {1, 1},
       .data = std::as_bytes(std::span(&scale, 1))}};
  ASSERT_TRUE(safetensors::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(dir, backend);
  ASSERT_TRUE(loader.ok());
  const std::vector<float> got = ToHost(backend, loader->Take("w.weight", {2, 2}));
  EXPECT_EQ(got, (std::vector<float>{0.75f, -0.75f, 1.5f, std::ldexp(0.75f, -9)}));
}

TEST(Fp8Weights, MisshapenScalesAreALoadError) {
  const Fp8Checkpoint ckpt = Write("fp8_bad");
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ckpt.dir, backend);
  ASSERT_TRUE(loader.ok());
  loader->set_fp8_block_size({kB0, kB1 / 2});  // expects [3, 5] scales; the file has [3, 3]
  EXPECT_TRUE(loader->Take("w.weight", {kRows, kCols}).empty());
  const absl::Status finish = loader->Finish();
  EXPECT_FALSE(finish.ok());
  EXPECT_NE(finish.message().find("w.weight_scale_inv"), std::string::npos) << finish;
}

}  // namespace
}  // namespace xserv::model
