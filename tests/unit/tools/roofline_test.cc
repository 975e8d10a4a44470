// The engine bench's roofline arithmetic on Qwen3-8B's shapes, against numbers worked out by hand.
#include "worker/tools/roofline.h"

#include "gtest/gtest.h"

namespace xserv::tools {
namespace {

ModelConfig Qwen3_8B() {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.hidden_size = 4096;
  c.head_dim = 128;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.intermediate_size = 12288;
  c.num_layers = 36;
  c.vocab_size = 151936;
  return c;
}

TEST(Roofline, MatmulBytesAndFlopsOfAQwen3DecodeStep) {
  const ModelConfig c = Qwen3_8B();
  // 36 x (4096 x 128 x (2 x 32 + 2 x 8) + 3 x 4096 x 12288) and 151,936 x 4,096.
  EXPECT_DOUBLE_EQ(DecoderLinearParams(c), 6945767424.0);
  EXPECT_DOUBLE_EQ(LmHeadParams(c), 622329856.0);
  const FamilyCost one = MatmulCost(c, PhaseShape{.batch = 1, .logits_rows = 1});
  EXPECT_DOUBLE_EQ(one.bytes, 2.0 * (6945767424.0 + 622329856.0));  // 15.14 GB (docs)
  EXPECT_DOUBLE_EQ(one.flops, 2.0 * (6945767424.0 + 622329856.0));
  // Batch 1 is bandwidth-bound: 15.14 GB at 4.22 TB/s = 3.587 ms.
  EXPECT_NEAR(RooflineUs(one, DevicePeaks{}), 3587.0, 1.0);
  EXPECT_NEAR(RooflineFraction(one, DevicePeaks{}, 5530.0), 3587.0 / 5530.0, 1e-3);
  // FP8 linears halve their bytes, not the lm_head's.
  const FamilyCost fp8 =
      MatmulCost(c, PhaseShape{.batch = 1, .logits_rows = 1, .linear_bytes_per_weight = 1});
  EXPECT_DOUBLE_EQ(fp8.bytes, 6945767424.0 + 2.0 * 622329856.0);
  // A 2,048-token prefill with one logits row is compute-bound: 28.45 TFLOP at 790 TFLOP/s.
  const FamilyCost prefill = MatmulCost(c, PhaseShape{.batch = 1, .new_tokens = 2048,
                                                      .logits_rows = 1});
  EXPECT_DOUBLE_EQ(prefill.flops, 2.0 * (2048.0 * 6945767424.0 + 622329856.0));
  EXPECT_NEAR(RooflineUs(prefill, DevicePeaks{}), prefill.flops / 790e12 * 1e6, 1e-6);
  EXPECT_EQ(RooflineFraction(prefill, DevicePeaks{}, 0.0), 0.0);
}

// W8A8 (FP8 activations and weights on FP8 tensor cores): the linears' flops count at the FP8
// rate, the bf16 lm_head's at the bf16 rate; a 256-row step is then bound by the sum of both.
TEST(Roofline, W8A8LinearsCountAtTheFp8Rate) {
  const ModelConfig c = Qwen3_8B();
  const FamilyCost w8a8 = MatmulCost(c, PhaseShape{.batch = 256,
                                                   .logits_rows = 256,
                                                   .linear_bytes_per_weight = 1,
                                                   .linear_fp8_math = true});
  EXPECT_DOUBLE_EQ(w8a8.fp8_flops, 2.0 * 256 * 6945767424.0);
  EXPECT_DOUBLE_EQ(w8a8.flops, 2.0 * 256 * 622329856.0);
  const DevicePeaks peaks;
  EXPECT_EQ(peaks.fp8_tflop_s, 2 * peaks.bf16_tflop_s);
  // 3.556 TFLOP at 1,580 plus 0.319 at 790: 2,654 us, above the 8.19 GB read (1,941 us).
  EXPECT_NEAR(RooflineUs(w8a8, peaks),
              w8a8.fp8_flops / 1580e12 * 1e6 + w8a8.flops / 790e12 * 1e6, 1e-6);
  EXPECT_NEAR(RooflineUs(w8a8, peaks), 2654.1, 1.0);
  // Without FP8 math the same step is bound at the bf16 rate alone.
  const FamilyCost bf16_math =
      MatmulCost(c, PhaseShape{.batch = 256, .logits_rows = 256, .linear_bytes_per_weight = 1});
  EXPECT_EQ(bf16_math.fp8_flops, 0.0);
  EXPECT_NEAR(RooflineUs(bf16_math, peaks), bf16_math.flops / 790e12 * 1e6, 1e-6);
}

// --fp8-lm-head: the lm_head's 622M weights read as one byte each, and at 256 rows its flops
// join the linears' at the FP8 rate.
TEST(Roofline, Fp8LmHeadHalvesItsBytesAndMovesItsFlops) {
  const ModelConfig c = Qwen3_8B();
  const FamilyCost b1 =
      MatmulCost(c, PhaseShape{.linear_bytes_per_weight = 1, .lm_head_bytes_per_weight = 1});
  EXPECT_DOUBLE_EQ(b1.bytes, 6945767424.0 + 622329856.0);
  const FamilyCost b256 = MatmulCost(c, PhaseShape{.batch = 256,
                                                   .logits_rows = 256,
                                                   .linear_bytes_per_weight = 1,
                                                   .linear_fp8_math = true,
                                                   .lm_head_bytes_per_weight = 1,
                                                   .lm_head_fp8_math = true});
  EXPECT_EQ(b256.flops, 0.0);
  EXPECT_DOUBLE_EQ(b256.fp8_flops, 2.0 * 256 * (6945767424.0 + 622329856.0));
}

TEST(Roofline, AttentionReadsTheCacheAndCountsCausalPairs) {
  const ModelConfig c = Qwen3_8B();
  // Decode: 64 sequences, 160 cached tokens each; K and V rows of 8 x 128 bf16 per layer.
  const FamilyCost decode =
      AttentionCost(c, PhaseShape{.batch = 64, .new_tokens = 1, .context = 160});
  const double kv_row = 2.0 * 8 * 128 * 2;  // 4 KiB
  EXPECT_DOUBLE_EQ(decode.bytes, 36.0 * 64 * 161 * kv_row);
  EXPECT_DOUBLE_EQ(decode.flops, 36.0 * 64 * 1 * 161 * 32 * 128 * 4);
  // Prefill of 2,048 new tokens: the causal pairs sum to 2048 * 2049 / 2.
  const FamilyCost prefill = AttentionCost(c, PhaseShape{.batch = 1, .new_tokens = 2048});
  EXPECT_DOUBLE_EQ(prefill.flops, 36.0 * (2048.0 * 2049.0 / 2.0) * 32 * 128 * 4);
  EXPECT_DOUBLE_EQ(prefill.bytes, 36.0 * 2048 * kv_row);
  // An FP8 cache: a code per element and an f32 scale per (token, kv head), for K and V.
  const FamilyCost fp8 = AttentionCost(
      c, PhaseShape{.batch = 64, .new_tokens = 1, .context = 160, .fp8_kv_cache = true});
  EXPECT_DOUBLE_EQ(fp8.bytes, 36.0 * 64 * 161 * (2.0 * 8 * (128 + 4)));
  EXPECT_DOUBLE_EQ(fp8.flops, decode.flops);
}

// gpt-oss-20b's shapes (refdata config): 24 layers, hidden 2880, 32 experts of intermediate 2880,
// top-4; 64 heads and 8 kv heads of 64.
ModelConfig GptOss20B() {
  ModelConfig c;
  c.architecture = Architecture::kGptOss;
  c.hidden_size = 2880;
  c.head_dim = 64;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.intermediate_size = 2880;
  c.num_layers = 24;
  c.vocab_size = 201088;
  c.moe.num_experts = 32;
  c.moe.num_experts_per_tok = 4;
  return c;
}

TEST(Roofline, MoeLinearsAreAttentionAndRouterAndExpertsFollowTheRouting) {
  const ModelConfig c = GptOss20B();
  // 24 x (2880 x 64 x (2 x 64 + 2 x 8) + 2880 x 32): no dense MLP.
  EXPECT_DOUBLE_EQ(DecoderLinearParams(c), 24.0 * (2880.0 * 64 * 144 + 2880.0 * 32));
  // One row reads exactly its top-4; many rows approach all 32.
  EXPECT_NEAR(ExpectedDistinctExperts(c, 1), 4.0, 1e-9);
  EXPECT_NEAR(ExpectedDistinctExperts(c, 2), 32.0 * (1 - 0.875 * 0.875), 1e-9);
  EXPECT_NEAR(ExpectedDistinctExperts(c, 4096), 32.0, 1e-6);
  EXPECT_EQ(ExpectedDistinctExperts(c, 0), 0.0);
  // Batch-1 decode, MXFP4: 24 layers x 4 experts x 3 x 2880^2 weights x 17/32 byte = 1.27 GB.
  const double mxfp4 = 17.0 / 32.0;
  const FamilyCost one = ExpertsCost(c, PhaseShape{.batch = 1, .expert_bytes_per_weight = mxfp4});
  EXPECT_DOUBLE_EQ(one.bytes, 24.0 * 4 * 3 * 2880.0 * 2880 * mxfp4);
  EXPECT_NEAR(one.bytes / 1e9, 1.27, 0.01);
  EXPECT_DOUBLE_EQ(one.flops, 24.0 * 2 * 4 * 3 * 2880.0 * 2880);
  // 64 rows: flops scale with the rows, bytes with the distinct experts only.
  const FamilyCost many = ExpertsCost(c, PhaseShape{.batch = 64, .expert_bytes_per_weight = mxfp4});
  EXPECT_DOUBLE_EQ(many.flops, 64 * one.flops);
  EXPECT_NEAR(many.bytes, one.bytes * ExpectedDistinctExperts(c, 64) / 4.0, 1.0);
  // A dense model has no expert cost.
  EXPECT_EQ(ExpertsCost(Qwen3_8B(), PhaseShape{.batch = 8}).bytes, 0.0);
}

}  // namespace
}  // namespace xserv::tools
