// Parsing the real HF configs (copied from shared/refdata) and hand-written Llama / Mistral /
// Qwen2 configs into ModelConfig.
#include "common/model_config/model_config.h"

#include <string>

#include "common/model_config/config_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model_config/test_data.h"

namespace xserv {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using testing::ModelConfigDataPath;

ModelConfig Load(const std::string& name) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(ModelConfigDataPath(name));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

TEST(ModelConfigTest, Qwen3_8B) {
  const ModelConfig c = Load("qwen3-8b.config.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.norm_type, NormType::kRmsNorm);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.activation, Activation::kSilu);
  EXPECT_EQ(c.position_encoding, PositionEncoding::kRope);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.layer_types.size(), 36u);
  EXPECT_THAT(c.layer_types, Each(AttentionType::kFull));  // use_sliding_window: false
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_FALSE(c.moe.IsMoe());
  EXPECT_EQ(c.quantization.method, QuantMethod::kNone);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, Qwen3_8B_Fp8) {
  const ModelConfig c = Load("qwen3-8b-fp8.config.reconstructed.json");
  EXPECT_EQ(c.quantization.method, QuantMethod::kFp8);
  EXPECT_THAT(c.quantization.weight_block_size, ElementsAre(128, 128));
}

TEST(ModelConfigTest, GptOss20B) {
  const ModelConfig c = Load("gpt-oss-20b.config.json");
  EXPECT_EQ(c.architecture, Architecture::kGptOss);
  EXPECT_EQ(c.vocab_size, 201088);
  EXPECT_EQ(c.hidden_size, 2880);
  EXPECT_EQ(c.intermediate_size, 2880);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);  // explicit; hidden / heads would be 45
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope.theta, 150000);
  EXPECT_EQ(c.rope.scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.scaling.factor, 32);
  EXPECT_EQ(c.rope.scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.scaling.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.rope.scaling.beta_slow, 1);
  EXPECT_FALSE(c.rope.scaling.truncate);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_proj_bias);
  EXPECT_FALSE(c.qk_norm);
  ASSERT_EQ(c.layer_types.size(), 24u);
  EXPECT_EQ(c.layer_types[0], AttentionType::kSliding);
  EXPECT_EQ(c.layer_types[1], AttentionType::kFull);
  EXPECT_EQ(c.layer_types[23], AttentionType::kFull);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.SlidingWindowForLayer(0), 128);
  EXPECT_EQ(c.SlidingWindowForLayer(1), 0);
  EXPECT_EQ(c.moe.num_experts, 32);
  EXPECT_EQ(c.moe.num_experts_per_tok, 4);
  EXPECT_DOUBLE_EQ(c.moe.swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(c.moe.swiglu_alpha, 1.702);
  EXPECT_EQ(c.quantization.method, QuantMethod::kMxfp4);
  EXPECT_THAT(c.quantization.modules_to_not_convert,
              ElementsAre("model.layers.*.self_attn", "model.layers.*.mlp.router",
                          "model.embed_tokens", "lm_head"));
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_THAT(c.eos_token_ids, ElementsAre(200002));
  EXPECT_EQ(c.pad_token_id, 199999);
}

TEST(ModelConfigTest, Gpt2) {
  const ModelConfig c = Load("gpt2.config.json");
  EXPECT_EQ(c.architecture, Architecture::kGpt2);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.intermediate_size, 3072);  // n_inner absent: 4 * n_embd
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.num_heads, 12);
  EXPECT_EQ(c.num_kv_heads, 12);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.norm_type, NormType::kLayerNorm);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_EQ(c.position_encoding, PositionEncoding::kLearned);
  EXPECT_TRUE(c.tie_word_embeddings);  // PretrainedConfig default
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_proj_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_THAT(c.layer_types, Each(AttentionType::kFull));
  EXPECT_EQ(c.bos_token_id, 50256);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(50256));
}

TEST(ModelConfigTest, Llama31WithLlama3RopeScaling) {
  const ModelConfig c = Load("llama-3.1-8b-style.config.json");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.head_dim, 128);  // hidden / heads
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000);
  EXPECT_EQ(c.rope.scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.scaling.factor, 8);
  EXPECT_DOUBLE_EQ(c.rope.scaling.low_freq_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope.scaling.high_freq_factor, 4);
  EXPECT_EQ(c.rope.scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_THAT(c.layer_types, Each(AttentionType::kFull));
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
}

TEST(ModelConfigTest, Llama32ExplicitHeadDimAndTiedEmbeddings) {
  const ModelConfig c = Load("llama-3.2-1b-style.config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.scaling.factor, 32);
}

TEST(ModelConfigTest, MistralWithNullSlidingWindow) {
  const ModelConfig c = Load("mistral-7b-v0.2-style.config.json");
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_THAT(c.layer_types, Each(AttentionType::kFull));
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
}

TEST(ModelConfigTest, MistralSlidingWindowOnEveryLayer) {
  const ModelConfig c = Load("mistral-7b-v0.1-style.config.json");
  EXPECT_THAT(c.layer_types, Each(AttentionType::kSliding));
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.SlidingWindowForLayer(31), 4096);
}

TEST(ModelConfigTest, Qwen2HasQkvBiasOnly) {
  const ModelConfig c = Load("qwen2.5-0.5b-style.config.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_THAT(c.layer_types, Each(AttentionType::kFull));  // use_sliding_window false
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(ModelConfigTest, LoadFromDirectory) {
  // tests/data/model_config has no config.json; a directory without one is NotFound.
  absl::StatusOr<ModelConfig> config = LoadModelConfig(ModelConfigDataPath(""));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
}

// Configs written by transformers 5 (tests/data/models/): rope_parameters instead of
// rope_scaling + rope_theta, "dtype" instead of "torch_dtype".
ModelConfig LoadTiny(const std::string& name) {
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig(std::string(XSERV_TEST_DATA_DIR) + "/models/" + name);
  EXPECT_TRUE(config.ok()) << name << ": " << config.status();
  return config.ok() ? *config : ModelConfig{};
}

TEST(ModelConfigTest, TransformersV5TinyModels) {
  const ModelConfig gpt2 = LoadTiny("gpt2-tiny");
  EXPECT_EQ(gpt2.intermediate_size, 256);
  EXPECT_TRUE(gpt2.tie_word_embeddings);
  EXPECT_EQ(gpt2.torch_dtype, "float32");

  const ModelConfig qwen3 = LoadTiny("qwen3-tiny");
  EXPECT_EQ(qwen3.head_dim, 32);
  EXPECT_FALSE(qwen3.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(qwen3.rope.theta, 10000);
  EXPECT_EQ(qwen3.rope.scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(LoadTiny("qwen3-tiny-tied-bf16").tie_word_embeddings);

  const ModelConfig llama = LoadTiny("llama3-tiny-sharded");
  EXPECT_EQ(llama.num_kv_heads, 1);
  EXPECT_DOUBLE_EQ(llama.rope.theta, 500000);
  EXPECT_EQ(llama.rope.scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(llama.rope.scaling.original_max_position_embeddings, 32);

  const ModelConfig oss = LoadTiny("gpt-oss-tiny-mxfp4");
  EXPECT_EQ(oss.moe.num_experts, 4);
  EXPECT_EQ(oss.moe.num_experts_per_tok, 2);
  EXPECT_DOUBLE_EQ(oss.rope.theta, 150000);
  EXPECT_EQ(oss.rope.scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(oss.rope.scaling.factor, 4);
  EXPECT_EQ(oss.rope.scaling.original_max_position_embeddings, 64);
  EXPECT_FALSE(oss.rope.scaling.truncate);
  EXPECT_EQ(oss.sliding_window, 8);
  EXPECT_THAT(oss.layer_types, ElementsAre(AttentionType::kSliding, AttentionType::kFull));
  EXPECT_EQ(oss.quantization.method, QuantMethod::kMxfp4);
}

TEST(ModelConfigTest, SupportedModelTypes) {
  EXPECT_THAT(SupportedModelTypes(),
              ElementsAre("gpt2", "gpt_oss", "llama", "mistral", "qwen2", "qwen3"));
}

}  // namespace
}  // namespace xserv
