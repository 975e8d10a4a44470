// Variants, defaults and error cases of ParseModelConfig, on small configs edited in the test.
#include <random>
#include <string>

#include "common/model_config/config_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/model_config/test_data.h"

namespace xserv {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

Json SmallLlama() {
  return Json{{"model_type", "llama"},    {"vocab_size", 1000},     {"hidden_size", 64},
              {"intermediate_size", 128}, {"num_hidden_layers", 4}, {"num_attention_heads", 8},
              {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5}};
}

absl::StatusOr<ModelConfig> Parse(const Json& json) {
  return ParseModelConfig(json.dump(), "test/config.json");
}

// The parse fails with InvalidArgument naming the file and every one of `needles`.
void ExpectError(const Json& json, std::initializer_list<std::string> needles) {
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_FALSE(config.ok()) << json.dump();
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(config.status().message());
  EXPECT_THAT(message, HasSubstr("test/config.json"));
  for (const std::string& needle : needles) EXPECT_THAT(message, HasSubstr(needle)) << message;
}

TEST(ModelConfigErrorsTest, BaselineParses) {
  absl::StatusOr<ModelConfig> config = Parse(SmallLlama());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_FALSE(config->tie_word_embeddings);  // LlamaConfig default
  EXPECT_EQ(config->bos_token_id, 1);         // LlamaConfig defaults
  EXPECT_THAT(config->eos_token_ids, ElementsAre(2));
  EXPECT_EQ(config->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(config->rope.theta, 10000);
}

TEST(ModelConfigErrorsTest, NotJsonOrNotObject) {
  for (const char* text : {"", "{", "[1]", "null", "{\"model_type\":\"llama\",}"}) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(text, "x/config.json");
    ASSERT_FALSE(config.ok()) << text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("x/config.json"));
  }
}

TEST(ModelConfigErrorsTest, UnknownModelTypeListsSupported) {
  Json json = SmallLlama();
  json["model_type"] = "falcon";
  ExpectError(json, {"falcon", "gpt2", "gpt_oss", "llama", "mistral", "qwen2", "qwen3"});
  json.erase("model_type");
  ExpectError(json, {"model_type", "missing"});
}

TEST(ModelConfigErrorsTest, MissingRequiredFields) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    Json json = SmallLlama();
    json.erase(key);
    ExpectError(json, {key, "missing"});
  }
  Json json = SmallLlama();
  json["hidden_size"] = nullptr;
  ExpectError(json, {"hidden_size"});
}

TEST(ModelConfigErrorsTest, WrongTypes) {
  Json json = SmallLlama();
  json["hidden_size"] = "64";
  ExpectError(json, {"hidden_size", "integer"});
  json = SmallLlama();
  json["hidden_size"] = 64.5;
  ExpectError(json, {"hidden_size"});
  json = SmallLlama();
  json["tie_word_embeddings"] = 1;
  ExpectError(json, {"tie_word_embeddings"});
  json = SmallLlama();
  json["hidden_size"] = 64.0;  // integral floats are accepted
  EXPECT_TRUE(Parse(json).ok());
}

TEST(ModelConfigErrorsTest, HeadsMustDivide) {
  Json json = SmallLlama();
  json["num_attention_heads"] = 7;
  json["num_key_value_heads"] = 7;
  ExpectError(json, {"num_attention_heads", "hidden_size", "head_dim"});
  json["head_dim"] = 16;  // an explicit head_dim lifts the constraint
  EXPECT_TRUE(Parse(json).ok());

  json = SmallLlama();
  json["num_key_value_heads"] = 3;
  ExpectError(json, {"num_key_value_heads", "num_attention_heads"});
  json["num_key_value_heads"] = 0;
  ExpectError(json, {"num_key_value_heads", "positive"});
}

TEST(ModelConfigErrorsTest, KvHeadsDefaultPerFamily) {
  Json json = SmallLlama();
  json.erase("num_key_value_heads");
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->num_kv_heads, 8);  // Llama: MHA
  json["model_type"] = "qwen3";
  ExpectError(json, {"num_key_value_heads", "missing"});
}

TEST(ModelConfigErrorsTest, LayerTypes) {
  Json json = SmallLlama();
  json["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  ExpectError(json, {"layer_types", "3", "4"});
  json["layer_types"] = {"full_attention", "full_attention", "chunked_attention", "full_attention"};
  ExpectError(json, {"layer_types", "chunked_attention"});
  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  ExpectError(json, {"sliding_window"});  // llama has no window
}

TEST(ModelConfigErrorsTest, RopeScalingVariants) {
  Json json = SmallLlama();
  json["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  ExpectError(json, {"rope_scaling.rope_type", "dynamic", "llama3", "yarn"});

  json["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  ExpectError(json, {"rope_scaling.low_freq_factor"});
  json["rope_scaling"]["low_freq_factor"] = 4.0;
  ExpectError(json, {"high_freq_factor"});
  json["rope_scaling"]["low_freq_factor"] = 1.0;
  EXPECT_TRUE(Parse(json).ok());

  // Legacy "type" key.
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope.scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(config->rope.scaling.factor, 2.0);

  // YaRN defaults: truncate true, original length = max_position_embeddings.
  json["max_position_embeddings"] = 4096;
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->rope.scaling.truncate);
  EXPECT_EQ(config->rope.scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(config->rope.scaling.beta_fast, 32);

  json["rope_scaling"] = {{"factor", 4.0}};
  ExpectError(json, {"rope_scaling.rope_type", "missing"});
  json["rope_scaling"] = "yarn";
  ExpectError(json, {"rope_scaling", "object"});
}

TEST(ModelConfigErrorsTest, RopeParametersOfTransformersV5) {
  Json json = SmallLlama();
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123456.0}};
  json["dtype"] = "float16";
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->rope.theta, 123456.0);
  EXPECT_EQ(config->rope.scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(config->torch_dtype, "float16");
}

TEST(ModelConfigErrorsTest, Qwen3Defaults) {
  Json json = SmallLlama();
  json["model_type"] = "qwen3";
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 128);  // Qwen3Config default, not hidden / heads
  EXPECT_TRUE(config->qk_norm);
  EXPECT_FALSE(config->bos_token_id.has_value());
  EXPECT_TRUE(config->eos_token_ids.empty());

  json["use_sliding_window"] = true;
  json["max_window_layers"] = 2;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->layer_types, ElementsAre(AttentionType::kFull, AttentionType::kFull,
                                               AttentionType::kSliding, AttentionType::kSliding));
  EXPECT_EQ(config->sliding_window, 4096);
  json["sliding_window"] = 512;
  config = Parse(json);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->SlidingWindowForLayer(3), 512);
  EXPECT_EQ(config->SlidingWindowForLayer(0), 0);
}

TEST(ModelConfigErrorsTest, MistralAbsentWindowTakesClassDefault) {
  Json json = SmallLlama();
  json["model_type"] = "mistral";
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sliding_window, 4096);
  json["sliding_window"] = nullptr;
  config = Parse(json);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->sliding_window, 0);
}

TEST(ModelConfigErrorsTest, GptOssVariants) {
  Json json = Json::parse(testing::ReadModelConfigData("gpt-oss-20b.config.json"));
  json.erase("num_experts_per_tok");  // the original spelling alone suffices
  json.erase("layer_types");          // default alternates, starting with sliding
  json.erase("rope_scaling");         // default YaRN
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->moe.num_experts_per_tok, 4);
  EXPECT_EQ(config->layer_types[0], AttentionType::kSliding);
  EXPECT_EQ(config->layer_types[1], AttentionType::kFull);
  EXPECT_EQ(config->rope.scaling.type, RopeScalingType::kYarn);
  EXPECT_FALSE(config->rope.scaling.truncate);

  json["num_experts_per_tok"] = 2;
  ExpectError(json, {"num_experts_per_tok", "experts_per_token"});
  json["experts_per_token"] = 64;
  json["num_experts_per_tok"] = 64;
  ExpectError(json, {"num_experts_per_tok", "num_local_experts"});

  json = Json::parse(testing::ReadModelConfigData("gpt-oss-20b.config.json"));
  json["layer_types"].erase(0);
  ExpectError(json, {"layer_types", "23", "24"});

  json = Json::parse(testing::ReadModelConfigData("gpt-oss-20b.config.json"));
  json["quantization_config"]["quant_method"] = "awq";
  ExpectError(json, {"quantization_config.quant_method", "awq", "mxfp4"});
  json["quantization_config"].erase("quant_method");
  ExpectError(json, {"quantization_config.quant_method", "missing"});

  json = Json::parse(testing::ReadModelConfigData("gpt-oss-20b.config.json"));
  json["rope_scaling"]["beta_fast"] = 0.5;
  ExpectError(json, {"beta_fast"});
}

TEST(ModelConfigErrorsTest, Gpt2Variants) {
  Json json = Json::parse(testing::ReadModelConfigData("gpt2.config.json"));
  json["n_inner"] = nullptr;
  json["activation_function"] = "relu";
  json["tie_word_embeddings"] = false;
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->intermediate_size, 3072);
  EXPECT_EQ(config->activation, Activation::kRelu);
  EXPECT_FALSE(config->tie_word_embeddings);

  json["activation_function"] = "mish";
  ExpectError(json, {"activation_function", "mish"});

  json = Json::parse(testing::ReadModelConfigData("gpt2.config.json"));
  json["n_head"] = 5;
  ExpectError(json, {"n_head", "n_embd"});

  json = Json::parse(testing::ReadModelConfigData("gpt2.config.json"));
  json["reorder_and_upcast_attn"] = true;
  ExpectError(json, {"reorder_and_upcast_attn"});

  json = Json::parse(testing::ReadModelConfigData("gpt2.config.json"));
  json.erase("n_embd");
  json["hidden_size"] = 768;  // transformers' attribute_map alias
  EXPECT_TRUE(Parse(json).ok());
  json.erase("hidden_size");
  ExpectError(json, {"n_embd", "missing"});
}

TEST(ModelConfigErrorsTest, TokenIds) {
  Json json = SmallLlama();
  json["eos_token_id"] = {5, 7};
  json["bos_token_id"] = nullptr;
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->eos_token_ids, ElementsAre(5, 7));
  EXPECT_FALSE(config->bos_token_id.has_value());  // explicit null overrides the default
  json["eos_token_id"] = 5000;
  ExpectError(json, {"eos_token_id", "5000"});
  json["eos_token_id"] = {1, "2"};
  ExpectError(json, {"eos_token_id"});
}

// Random edits of a real config must never crash the parser (errors are expected).
TEST(ModelConfigErrorsTest, RandomMutationsNeverCrash) {
  const std::string valid = testing::ReadModelConfigData("gpt-oss-20b.config.json");
  std::mt19937_64 rng(99);
  const char alphabet[] = "{}[]\",:-0123456789.eE ntrufals_";
  for (int i = 0; i < 3000; ++i) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t pos = rng() % text.size();
      if (rng() % 4 == 0) {
        text.erase(pos, 1);
      } else {
        text[pos] = alphabet[rng() % (sizeof(alphabet) - 1)];
      }
    }
    absl::StatusOr<ModelConfig> config = ParseModelConfig(text, "fuzz");
    if (!config.ok()) {
      EXPECT_THAT(std::string(config.status().message()), HasSubstr("fuzz"));
    }
  }
}

}  // namespace
}  // namespace xserv
