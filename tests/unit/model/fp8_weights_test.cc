// FP8 block-scaled checkpoints (Qwen3-8B-FP8 layout): WeightLoader dequantises X[i, j] *
// X_scale_inv[i / b0, j / b1] exactly (the CPU backend keeps f32), for whole tensors and for the
// row, column and multi-range slices tensor parallelism takes, and records bad scale tensors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "common/safetensors/writer.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/fp8.h"
#include "worker/model/layers.h"
#include "worker/model/tensor_parallel.h"
#include "worker/model/weight_loader.h"
#include "worker/tools/model_maker.h"
#include "tests/unit/model/model_test_util.h"

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

TEST(Fp8Weights, WholeTensorAndSlicesAreExact) {
  const Fp8Checkpoint ckpt = Write("fp8_exact");
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ckpt.dir, backend);
  ASSERT_TRUE(loader.ok()) << loader.status();
  loader->set_fp8_block_size({kB0, kB1});
  EXPECT_EQ(testing::ToHost(backend, loader->Take("w.weight", {kRows, kCols})), ckpt.dequantised);

  // Rows 3..20 and 33..40 (crossing block edges), as a fused column-parallel shard takes them.
  const TensorSlice rows{.dim = 0, .ranges = {{3, 20}, {33, 40}}};
  const std::vector<float> got_rows = testing::ToHost(backend, loader->Take("w.weight", {kRows, kCols}, rows));
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
  const std::vector<float> got_cols = testing::ToHost(backend, loader->Take("w.weight", {kRows, kCols}, cols));
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
  const std::vector<float> got = testing::ToHost(backend, loader->Take("w.weight", {2, 2}));
  EXPECT_EQ(got, (std::vector<float>{0.75f, -0.75f, 1.5f, std::ldexp(0.75f, -9)}));
}

// The quantiser: bf16 scales from each block's amax (1 for an all-zero block), codes that decode
// back within E4M3's half-ulp (or its subnormal step).
TEST(Fp8Quantiser, BlockScalesAndRoundTrip) {
  constexpr int64_t kR = 5, kC = 7, kB = 4;  // partial blocks in both directions
  std::vector<float> values(kR * kC, 0.0f);
  std::mt19937 rng(9);
  for (int64_t i = 0; i < kR; ++i) {
    for (int64_t j = 0; j < kC; ++j) {
      if (i < 4 && j < 4) continue;  // block (0, 0) stays all zero
      values[i * kC + j] = std::ldexp(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f,
                                      static_cast<int>(rng() % 9) - 4);
    }
  }
  const kernels::Fp8Blocks q = kernels::QuantizeFp8Blocks(values, kR, kC, kB);
  ASSERT_EQ(q.scale_inv.size(), 4u);  // [2, 2]
  EXPECT_EQ(q.scale_inv[0], 1.0f);
  std::vector<float> back(values.size());
  kernels::DequantizeFp8Blocks(q, kR, kC, kB, back);
  for (int64_t bi = 0; bi < 2; ++bi) {
    for (int64_t bj = 0; bj < 2; ++bj) {
      float amax = 0;
      for (int64_t i = bi * kB; i < std::min(kR, (bi + 1) * kB); ++i) {
        for (int64_t j = bj * kB; j < std::min(kC, (bj + 1) * kB); ++j) {
          amax = std::max(amax, std::fabs(values[i * kC + j]));
        }
      }
      const float scale = q.scale_inv[bi * 2 + bj];
      if (amax > 0) {
        EXPECT_EQ(scale, safetensors::Bf16ToFloat(safetensors::FloatToBf16(amax / 448.0f)));
      }
      for (int64_t i = bi * kB; i < std::min(kR, (bi + 1) * kB); ++i) {
        for (int64_t j = bj * kB; j < std::min(kC, (bj + 1) * kB); ++j) {
          const float v = values[i * kC + j], got = back[i * kC + j];
          // E4M3: 3 mantissa bits (relative half-ulp 1/16); subnormals step 2^-9 * scale.
          EXPECT_LE(std::fabs(got - v), std::max(std::fabs(v) / 16.0f, std::ldexp(scale, -10)) +
                                            1e-12f)
              << i << "," << j << ": " << v << " -> " << got;
        }
      }
    }
  }
}

// A matrix of many row bands (quantised on several threads) gives exactly what each band
// quantised alone gives: no band's codes or scales depend on how the bands were split.
TEST(Fp8Quantiser, ThreadedBandsEqualBandByBand) {
  constexpr int64_t kB = 16, kR = 40 * kB + 3, kC = 3 * kB + 5;
  std::vector<float> values(kR * kC);
  std::mt19937 rng(10);
  for (float& v : values) {
    v = std::ldexp(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f,
                   static_cast<int>(rng() % 9) - 4);
  }
  const kernels::Fp8Blocks whole = kernels::QuantizeFp8Blocks(values, kR, kC, kB);
  const int64_t s1 = (kC + kB - 1) / kB;
  for (int64_t r0 = 0; r0 < kR; r0 += kB) {
    const int64_t rows = std::min(kB, kR - r0);
    const kernels::Fp8Blocks band = kernels::QuantizeFp8Blocks(
        std::span<const float>(values).subspan(r0 * kC, rows * kC), rows, kC, kB);
    ASSERT_TRUE(std::equal(band.codes.begin(), band.codes.end(), whole.codes.begin() + r0 * kC))
        << "band at row " << r0;
    ASSERT_TRUE(std::equal(band.scale_inv.begin(), band.scale_inv.end(),
                           whole.scale_inv.begin() + (r0 / kB) * s1))
        << "band at row " << r0;
  }
}

// The W8A8 activation quantiser: per row and group, scale = amax / 448 exactly (1 for an
// all-zero group), the largest magnitude coded as +-448, every value back within E4M3's
// half-ulp (or its subnormal step).
TEST(Fp8Quantiser, RowGroupScalesAndRoundTrip) {
  constexpr int64_t kRows = 3, kCols = 10, kGroup = 4;  // a partial last group
  std::vector<float> values(kRows * kCols, 0.0f);
  std::mt19937 rng(11);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      if (i == 1 && j < 4) continue;  // row 1, group 0 stays all zero
      values[i * kCols + j] = std::ldexp(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f,
                                         static_cast<int>(rng() % 9) - 4);
    }
  }
  const kernels::Fp8Rows q = kernels::QuantizeFp8Rows(values, kRows, kCols, kGroup);
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(kRows * 3));
  ASSERT_EQ(q.codes.size(), values.size());
  EXPECT_EQ(q.scales[1 * 3 + 0], 1.0f);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t g = 0; g < 3; ++g) {
      float amax = 0;
      for (int64_t j = g * kGroup; j < std::min(kCols, (g + 1) * kGroup); ++j) {
        amax = std::max(amax, std::fabs(values[i * kCols + j]));
      }
      const float scale = q.scales[i * 3 + g];
      if (amax == 0) continue;
      EXPECT_EQ(scale, amax / 448.0f);
      for (int64_t j = g * kGroup; j < std::min(kCols, (g + 1) * kGroup); ++j) {
        const float v = values[i * kCols + j];
        const float got = safetensors::F8E4M3ToFloat(q.codes[i * kCols + j]) * scale;
        if (std::fabs(v) == amax) {
          EXPECT_EQ(std::fabs(safetensors::F8E4M3ToFloat(q.codes[i * kCols + j])), 448.0f);
        }
        EXPECT_LE(std::fabs(got - v), std::max(std::fabs(v) / 16.0f, std::ldexp(scale, -10)) +
                                          1e-12f)
            << i << "," << j << ": " << v << " -> " << got;
      }
    }
  }
}

// The per-row layout of a weight's block scales: each row's scale for each column group is its
// block's, rows contiguous within a group; partial last blocks in both directions.
TEST(Fp8Quantiser, RowScalesRepeatEachBlockScalePerRow) {
  constexpr int64_t kRows = 5, kCols = 7, kBlock = 2;  // 3 x 4 blocks
  std::vector<float> values(kRows * kCols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::ldexp(1.0f, static_cast<int>(i % 11));
  const kernels::Fp8Blocks q = kernels::QuantizeFp8Blocks(values, kRows, kCols, kBlock);
  ASSERT_EQ(q.scale_inv.size(), 3u * 4u);
  const std::vector<float> rows = kernels::Fp8RowScales(q.scale_inv, kRows, kCols, kBlock);
  ASSERT_EQ(rows.size(), static_cast<size_t>(4 * kRows));
  for (int64_t g = 0; g < 4; ++g) {
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(rows[g * kRows + r], q.scale_inv[(r / kBlock) * 4 + g]) << r << "," << g;
    }
  }
  // Distinct blocks give distinct entries: a transposed or block-major layout would differ.
  EXPECT_NE(rows[0 * kRows + 0], rows[1 * kRows + 0]);
  EXPECT_NE(rows[0 * kRows + 0], rows[0 * kRows + 2]);
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

namespace xserv::model {
namespace {

// log p(prompt[t + 1] | prompt[..t]) from all-rows logits [prompt.size(), vocab].
std::vector<float> PromptLogprobs(const std::vector<float>& logits,
                                  const std::vector<int32_t>& prompt, int64_t vocab) {
  std::vector<float> lp;
  for (size_t t = 0; t + 1 < prompt.size(); ++t) {
    const float* row = logits.data() + t * vocab;
    double max = row[0], sum = 0;
    for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, row[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    lp.push_back(static_cast<float>(row[prompt[t + 1]] - max - std::log(sum)));
  }
  return lp;
}

// Mean and largest |a - b| over the positions.
std::pair<double, double> LogprobDistance(const std::vector<float>& a,
                                          const std::vector<float>& b) {
  double mean = 0, worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    const double d = std::fabs(a[t] - b[t]);
    mean += d / static_cast<double>(a.size());
    worst = std::max(worst, d);
  }
  return {mean, worst};
}

std::vector<int32_t> TestPrompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % 150000));
  return prompt;
}

// The tiny Qwen3 of `seed` written twice from the same random weights: root/0 BF16, root/32 FP8
// with 32 x 32 blocks.
absl::Status WriteTinyQwen3Twins(const std::string& root, uint64_t seed,
                                 const std::string& tokenizer) {
  for (int64_t block : {int64_t{0}, int64_t{32}}) {
    RETURN_IF_ERROR(tools::MakeModel({.arch = tools::ModelArch::kQwen3,
                                      .preset = tools::ModelPreset::kTiny,
                                      .seed = seed,
                                      .tokenizer_dir = tokenizer,
                                      .out_dir = root + "/" + std::to_string(block),
                                      .fp8_block = block}));
  }
  return absl::OkStatus();
}

// All-rows logits [prompt.size(), vocab] of the model in `dir` loaded with `options` on one CPU
// thread; empty (the failure reported) when it does not load.
std::vector<float> PromptLogits(const std::string& dir, const ModelLoadOptions& options,
                                const std::vector<int32_t>& prompt, int64_t& vocab) {
  testing::Harness h(dir, options, /*num_threads=*/1);
  EXPECT_TRUE(h.ok()) << dir;
  if (!h.ok()) return {};
  vocab = h.vocab();
  return h.Step({SequenceChunk{
      .tokens = prompt, .block_table = h.NewTable(64), .logits = LogitsRows::kAll}});
}

// A tiny Qwen3 written twice from the same random weights: BF16, and FP8 with 32x32 blocks (the
// Qwen3-8B-FP8 layout at a tiny model's scale, so every matrix has several blocks). The FP8 model
// loads through the whole model path and its prompt logprobs stay within a quantisation-sized
// distance of the BF16 model's (2026-11-29: mean 0.0055, max 0.018 nats over 47 positions).
TEST(Fp8Model, TinyQwen3TracksItsBf16Twin) {
  const std::string tokenizer = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/qwen3";
  if (!std::filesystem::exists(tokenizer + "/tokenizer.json")) {
    GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  }
  const std::string root = (std::filesystem::path(::testing::TempDir()) / "fp8_twin").string();
  const absl::Status made = WriteTinyQwen3Twins(root, 3, tokenizer);
  ASSERT_TRUE(made.ok()) << made;
  std::vector<std::vector<float>> logprobs, all_logits;
  const std::vector<int32_t> prompt = TestPrompt();
  int64_t vocab = 0;
  // BF16; the FP8 checkpoint; the BF16 checkpoint quantised on load (--quantization fp8).
  // The last two keep the weights FP8 and multiply through MatmulFp8 (the CPU's reference decodes
  // exactly, so the logits must equal the decoded-at-load runs bit for bit).
  struct Run {
    const char* dir;
    int64_t quantize_block;
    bool fp8_matmuls;
  };
  for (const Run run : {Run{"0", 0, false}, Run{"32", 0, false}, Run{"0", 32, false},
                        Run{"32", 0, true}, Run{"0", 32, true}}) {
    const std::vector<float> logits =
        PromptLogits(root + "/" + run.dir,
                     ModelLoadOptions{.max_num_tokens = 256,
                                      .quantize_fp8_block = run.quantize_block,
                                      .fp8_matmuls = run.fp8_matmuls},
                     prompt, vocab);
    ASSERT_EQ(logits.size(), prompt.size() * static_cast<size_t>(vocab));
    all_logits.push_back(logits);
    logprobs.push_back(PromptLogprobs(logits, prompt, vocab));
  }
  const auto [mean, worst] = LogprobDistance(logprobs[0], logprobs[1]);
  std::cout << "FP8 (32x32 blocks) vs BF16 tiny Qwen3: mean |dlogprob| " << mean << " nats, max "
            << worst << "\n";
  EXPECT_GT(mean, 0.0);  // the weights really are quantised
  EXPECT_LT(mean, 0.02);
  EXPECT_LT(worst, 0.1);
  // Quantising the BF16 master on load gives exactly the FP8 checkpoint's weights.
  EXPECT_EQ(all_logits[1], all_logits[2]);
  // Kept FP8 (MatmulFp8) or decoded at load: the same logits.
  EXPECT_EQ(all_logits[3], all_logits[1]);
  EXPECT_EQ(all_logits[4], all_logits[1]);
}

// --fp8-lm-head on the tiny Qwen3's FP8 checkpoint (whose lm_head is BF16): the lm_head goes
// through FP8 with 128 x 128 blocks on load, the logits move by that rounding and no more, and
// kept FP8 (MatmulFp8) they equal the decoded-at-load run bit for bit. With --quantization fp8
// the lm_head takes that block.
TEST(Fp8Model, Fp8LmHeadMovesTheLogitsByItsRounding) {
  const std::string tokenizer = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/qwen3";
  if (!std::filesystem::exists(tokenizer + "/tokenizer.json")) {
    GTEST_SKIP() << "Qwen3 tokenizer not fetched (scripts/fetch-assets.sh)";
  }
  const std::string root = (std::filesystem::path(::testing::TempDir()) / "fp8_head").string();
  const absl::Status made = WriteTinyQwen3Twins(root, 4, tokenizer);
  ASSERT_TRUE(made.ok()) << made;
  const std::vector<int32_t> prompt = TestPrompt();
  struct Run {
    const char* dir;
    int64_t quantize_block;
    bool fp8_matmuls, fp8_lm_head;
  };
  const std::vector<Run> runs = {{"32", 0, false, false}, {"32", 0, false, true},
                                 {"32", 0, true, true},   {"0", 32, false, false},
                                 {"0", 32, false, true},  {"0", 32, true, true}};
  std::vector<std::vector<float>> logits, logprobs;
  for (const Run& run : runs) {
    int64_t vocab = 0;
    logits.push_back(PromptLogits(root + "/" + run.dir,
                                  ModelLoadOptions{.max_num_tokens = 256,
                                                   .quantize_fp8_block = run.quantize_block,
                                                   .fp8_matmuls = run.fp8_matmuls,
                                                   .fp8_lm_head = run.fp8_lm_head},
                                  prompt, vocab));
    ASSERT_EQ(logits.back().size(), prompt.size() * static_cast<size_t>(vocab));
    logprobs.push_back(PromptLogprobs(logits.back(), prompt, vocab));
  }
  for (size_t base : {size_t{0}, size_t{3}}) {
    const auto [mean, worst] = LogprobDistance(logprobs[base], logprobs[base + 1]);
    std::cout << "FP8 lm_head vs BF16 lm_head (" << runs[base].dir << "): mean |dlogprob| " << mean
              << " nats, max " << worst << "\n";
    EXPECT_GT(mean, 0.0);  // the lm_head really is quantised
    EXPECT_LT(mean, 0.02);
    EXPECT_LT(worst, 0.1);
    EXPECT_EQ(logits[base + 2], logits[base + 1]);  // kept FP8 or decoded at load
  }
  // The 128 block of the FP8 checkpoint's run and the 32 of --quantization fp8 differ.
  EXPECT_NE(logprobs[1], logprobs[4]);
}

// A backend whose FP8 GEMM would decode the whole weight at every batched call
// (Backend::Fp8MatmulAtAnyRows false, as CUDA without the W8A8 GEMM's shape): TakeLmHead then
// keeps the FP8-rounded lm_head dense, with the values the kept form multiplies.
class DecodingCpuBackend : public kernels::cpu::CpuBackend {
 public:
  DecodingCpuBackend() : CpuBackend(kernels::cpu::CpuBackendOptions{}) {}
  bool Fp8MatmulAtAnyRows(int64_t, int64_t, int64_t) const override { return false; }
};

TEST(Fp8Model, LmHeadStaysDenseWhereFp8GemmsWouldDecodeIt) {
  constexpr int64_t kVocab = 96, kHidden = 64, kBlock = 32;
  std::mt19937 rng(9);
  std::vector<float> head(kVocab * kHidden);
  for (float& v : head) v = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "fp8_head_dense").string();
  std::filesystem::create_directories(dir);
  const std::vector<safetensors::TensorView> tensors = {
      {.name = "lm_head.weight", .dtype = safetensors::DType::kF32, .shape = {kVocab, kHidden},
       .data = std::as_bytes(std::span(head))}};
  ASSERT_TRUE(safetensors::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  ModelConfig config;
  config.vocab_size = kVocab;
  config.hidden_size = kHidden;
  const VocabShard whole{0, kVocab};
  std::vector<float> rounded(head.size());
  kernels::DequantizeFp8Blocks(kernels::QuantizeFp8Blocks(head, kVocab, kHidden, kBlock), kVocab,
                               kHidden, kBlock, rounded);
  ASSERT_NE(rounded, head);

  kernels::cpu::CpuBackend cpu(kernels::cpu::CpuBackendOptions{});
  DecodingCpuBackend decoding;
  for (kernels::Backend* backend : {static_cast<kernels::Backend*>(&cpu),
                                    static_cast<kernels::Backend*>(&decoding)}) {
    auto loader = WeightLoader::Open(dir, *backend);
    ASSERT_TRUE(loader.ok()) << loader.status();
    loader->set_fp8_matmuls(true);
    loader->set_quantize_lm_head_fp8_block(kBlock);
    const LinearWeight w = TakeLmHead(*loader, *backend, whole, "lm_head.weight", config);
    EXPECT_TRUE(loader->Finish().ok());
    if (backend == &cpu) {
      ASSERT_FALSE(w.codes.empty());  // kept FP8
      EXPECT_TRUE(w.dense.empty());
    } else {
      ASSERT_TRUE(w.codes.empty());
      EXPECT_EQ(testing::ToHost(*backend, w.dense), rounded);
    }
  }
}

// A backend with a one-op gated MLP (Backend::GatedMlpRowFp8) that takes the down projection
// transposed: it computes the op from the transposed weight on the host, so that the loader's
// transposition and the model's use of it are checked against the CPU's separate ops.
class TransposedDownCpuBackend : public kernels::cpu::CpuBackend {
 public:
  TransposedDownCpuBackend() : CpuBackend(kernels::cpu::CpuBackendOptions{}) {}
  bool WantsFp8DownTransposed(int64_t, int64_t, int64_t) const override { return true; }
  absl::Status GatedMlpRowFp8(const kernels::PreNorm* norm, const kernels::Tensor& normed,
                              const kernels::Fp8Weight& gate_up, const kernels::Fp8Weight& down_t,
                              const kernels::Tensor& out) override {
    if (normed.dim(0) != 1) return absl::UnimplementedError("one row");
    ++calls;
    const int64_t inter = down_t.codes.dim(0), hidden = down_t.codes.dim(1);
    ASSIGN_OR_RETURN(kernels::Buffer gu, Allocate(kernels::DType::kF32, {1, 2 * inter}));
    const kernels::Tensor g = gu.view().SliceLast(0, inter);
    if (norm != nullptr) {
      RETURN_IF_ERROR(AddRmsNormMatmul(*norm, kernels::MatmulWeight{.fp8 = &gate_up}, nullptr,
                                       gu.view()));
    } else {
      RETURN_IF_ERROR(MatmulFp8(normed, gate_up, nullptr, gu.view()));
    }
    RETURN_IF_ERROR(SiluMul(g, gu.view().SliceLast(inter, 2 * inter), g));
    std::vector<float> act(2 * inter), down_values(inter * hidden), result(hidden);
    RETURN_IF_ERROR(CopyToHost(gu.view(), act.data()));
    std::vector<uint8_t> codes(inter * hidden);
    std::vector<float> scales(down_t.scales.numel());
    RETURN_IF_ERROR(CopyToHost(down_t.codes, codes.data()));
    RETURN_IF_ERROR(CopyToHost(down_t.scales, scales.data()));
    kernels::DequantizeFp8Blocks({.codes = codes, .scale_inv = scales}, inter, hidden,
                                 down_t.block, down_values);
    for (int64_t h = 0; h < hidden; ++h) {
      double sum = 0;
      for (int64_t i = 0; i < inter; ++i) sum += double{act[i]} * down_values[i * hidden + h];
      result[h] = static_cast<float>(sum);
    }
    return CopyFromHost(result.data(), out);
  }
  int calls = 0;
};

// --fused-mlp-row's model side on the CPU: the loader transposes the FP8 down projection (codes
// and block scales) for a backend that asks, and a one-row step's MLP goes through
// GatedMlpRowFp8 with it (with and without the block's pre-norm), giving the separate ops'
// output; steps of two rows keep the separate ops.
TEST(Fp8Model, OneRowMlpTakesTheTransposedDown) {
  constexpr int64_t kHidden = 64, kInter = 96, kBlock = 32;
  std::mt19937 rng(11);
  const auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
    return v;
  };
  const std::vector<float> gate = random(kInter * kHidden), up = random(kInter * kHidden),
                           down = random(kHidden * kInter);
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "fp8_mlp_row").string();
  std::filesystem::create_directories(dir);
  const auto view = [](const char* name, const std::vector<float>& v, int64_t rows,
                       int64_t cols) {
    return safetensors::TensorView{.name = name, .dtype = safetensors::DType::kF32,
                                   .shape = {rows, cols}, .data = std::as_bytes(std::span(v))};
  };
  const std::vector<safetensors::TensorView> tensors = {
      view("model.layers.0.mlp.gate_proj.weight", gate, kInter, kHidden),
      view("model.layers.0.mlp.up_proj.weight", up, kInter, kHidden),
      view("model.layers.0.mlp.down_proj.weight", down, kHidden, kInter)};
  ASSERT_TRUE(safetensors::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  ModelConfig config;
  config.hidden_size = kHidden;
  config.intermediate_size = kInter;
  config.num_heads = 2;
  config.num_kv_heads = 1;
  config.head_dim = 32;
  const std::vector<float> x = random(2 * kHidden), residual = random(2 * kHidden),
                           norm_weight = random(kHidden);

  kernels::cpu::CpuBackend cpu(kernels::cpu::CpuBackendOptions{});
  TransposedDownCpuBackend transposing;
  // [backend][pre-norm][rows] -> the MLP's output rows.
  std::vector<float> outputs[2][2][2];
  for (int b = 0; b < 2; ++b) {
    kernels::Backend& backend = b == 0 ? static_cast<kernels::Backend&>(cpu) : transposing;
    auto loader = WeightLoader::Open(dir, backend);
    ASSERT_TRUE(loader.ok()) << loader.status();
    loader->set_fp8_matmuls(true);
    loader->set_quantize_fp8_block(kBlock);
    absl::Status status;
    const GatedMlpWeights w =
        GatedMlpWeights::Load(*loader, backend, config, TpShard{}, "model.layers.0.", status);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(loader->Finish().ok());
    ASSERT_FALSE(w.down.codes.empty());
    if (b == 0) {
      EXPECT_TRUE(w.down_t.empty());
    } else {  // codes and scales transposed exactly
      ASSERT_FALSE(w.down_t.codes.empty());
      const kernels::Tensor d = w.down.codes.view(), dt = w.down_t.codes.view();
      ASSERT_EQ(dt.dim(0), kInter);
      ASSERT_EQ(dt.dim(1), kHidden);
      std::vector<uint8_t> codes(kHidden * kInter), codes_t(kHidden * kInter);
      ASSERT_TRUE(backend.CopyToHost(d, codes.data()).ok());
      ASSERT_TRUE(backend.CopyToHost(dt, codes_t.data()).ok());
      const std::vector<float> scales = testing::ToHost(backend, w.down.scales);
      const std::vector<float> scales_t = testing::ToHost(backend, w.down_t.scales);
      for (int64_t r = 0; r < d.dim(0); ++r) {
        for (int64_t c = 0; c < d.dim(1); ++c) {
          ASSERT_EQ(codes_t[c * kHidden + r], codes[r * kInter + c]);
          ASSERT_EQ(scales_t[(c / kBlock) * (kHidden / kBlock) + r / kBlock],
                    scales[(r / kBlock) * (kInter / kBlock) + c / kBlock]);
        }
      }
    }
    auto ws = Workspace::Allocate(backend, config, 4, kInter, false);
    ASSERT_TRUE(ws.ok()) << ws.status();
    for (int with_norm = 0; with_norm < 2; ++with_norm) {
      for (int64_t rows : {int64_t{1}, int64_t{2}}) {
        auto in = backend.Allocate(kernels::DType::kF32, {rows, kHidden});
        auto res = backend.Allocate(kernels::DType::kF32, {rows, kHidden});
        auto res_out = backend.Allocate(kernels::DType::kF32, {rows, kHidden});
        auto weight = backend.Allocate(kernels::DType::kF32, {kHidden});
        ASSERT_TRUE(in.ok() && res.ok() && res_out.ok() && weight.ok());
        ASSERT_TRUE(backend.CopyFromHost(x.data(), in->view()).ok());
        ASSERT_TRUE(backend.CopyFromHost(residual.data(), res->view()).ok());
        ASSERT_TRUE(backend.CopyFromHost(norm_weight.data(), weight->view()).ok());
        const kernels::Tensor normed = ws->normed.view().SliceRows(0, rows);
        ASSERT_TRUE(backend.CopyFromHost(x.data(), normed).ok());
        const kernels::PreNorm norm{.x = in->view(), .residual = res->view(),
                                    .residual_out = res_out->view(), .weight = weight->view(),
                                    .eps = 1e-6f, .normed = normed};
        const int before = transposing.calls;
        ASSERT_TRUE(
            RunGatedMlp(backend, w, normed, *ws, rows, with_norm ? &norm : nullptr).ok());
        if (b == 1) EXPECT_EQ(transposing.calls - before, rows == 1 ? 1 : 0);
        std::vector<float>& got = outputs[b][with_norm][rows - 1];
        got.resize(rows * kHidden);
        ASSERT_TRUE(
            backend.CopyToHost(ws->block_out.view().SliceRows(0, rows), got.data()).ok());
      }
    }
  }
  for (int with_norm = 0; with_norm < 2; ++with_norm) {
    SCOPED_TRACE(with_norm ? "pre-norm" : "normed x");
    const std::vector<float>& want = outputs[0][with_norm][0];
    const std::vector<float>& got = outputs[1][with_norm][0];
    double scale = 0;
    for (const float v : want) scale = std::max(scale, std::fabs(double{v}));
    ASSERT_GT(scale, 0.0);
    for (int64_t h = 0; h < kHidden; ++h) EXPECT_NEAR(got[h], want[h], 1e-5 * scale) << h;
    EXPECT_EQ(outputs[1][with_norm][1], outputs[0][with_norm][1]);  // two rows: the same ops
  }
}

TEST(Fp8Model, QuantiseOnLoadRefusesGpt2AndFp8Checkpoints) {
  const std::string tokenizers = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/";
  for (const char* name : {"gpt2", "qwen3"}) {
    if (!std::filesystem::exists(tokenizers + name + "/tokenizer.json")) {
      GTEST_SKIP() << name << " tokenizer not fetched (scripts/fetch-assets.sh)";
    }
  }
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "fp8_refuse";
  const std::string gpt2_dir = (root / "gpt2").string(), fp8_dir = (root / "qwen3-fp8").string();
  ASSERT_TRUE(tools::MakeModel({.arch = tools::ModelArch::kGpt2,
                                .preset = tools::ModelPreset::kTiny,
                                .seed = 1,
                                .tokenizer_dir = tokenizers + "gpt2",
                                .out_dir = gpt2_dir})
                  .ok());
  ASSERT_TRUE(tools::MakeModel({.arch = tools::ModelArch::kQwen3,
                                .preset = tools::ModelPreset::kTiny,
                                .seed = 1,
                                .tokenizer_dir = tokenizers + "qwen3",
                                .out_dir = fp8_dir,
                                .fp8_block = 32})
                  .ok());
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  const auto gpt2 = LoadModel(gpt2_dir, backend, ModelLoadOptions{.quantize_fp8_block = 128});
  EXPECT_EQ(gpt2.status().code(), absl::StatusCode::kInvalidArgument);
  const auto twice = LoadModel(fp8_dir, backend, ModelLoadOptions{.quantize_fp8_block = 128});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("FP8 already"), std::string::npos) << twice.status();
  // GPT-2's lm_head is its token embedding: no FP8 copy of it.
  const auto tied = LoadModel(gpt2_dir, backend, ModelLoadOptions{.fp8_lm_head = true});
  EXPECT_EQ(tied.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tied.status().message().find("tied"), std::string::npos) << tied.status();
}

}  // namespace
}  // namespace xserv::model
