#include "common/model_config/generation_config.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model_config/test_data.h"

namespace xserv {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ModelConfigDataPath;

TEST(GenerationConfigTest, Qwen3) {
  absl::StatusOr<std::optional<GenerationConfig>> loaded =
      LoadGenerationConfigIfPresent(ModelConfigDataPath("qwen3-8b.generation_config.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  const GenerationConfig& g = **loaded;
  EXPECT_EQ(g.bos_token_id, 151643);
  EXPECT_THAT(g.eos_token_ids, ElementsAre(151645, 151643));
  EXPECT_EQ(g.pad_token_id, 151643);
  EXPECT_EQ(g.do_sample, true);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.95);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
}

TEST(GenerationConfigTest, GptOss) {
  absl::StatusOr<std::optional<GenerationConfig>> loaded =
      LoadGenerationConfigIfPresent(ModelConfigDataPath("gpt-oss-20b.generation_config.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  const GenerationConfig& g = **loaded;
  EXPECT_EQ(g.bos_token_id, 199998);
  EXPECT_THAT(g.eos_token_ids, ElementsAre(200002, 199999, 200012));
  EXPECT_FALSE(g.temperature.has_value());
  EXPECT_FALSE(g.top_k.has_value());
}

TEST(GenerationConfigTest, IntEosAndOptionalFile) {
  absl::StatusOr<GenerationConfig> g =
      ParseGenerationConfig(R"({"eos_token_id": 2, "top_k": 0, "temperature": 0})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->eos_token_ids, ElementsAre(2));

  // A directory without the file: nullopt, not an error.
  absl::StatusOr<std::optional<GenerationConfig>> absent =
      LoadGenerationConfigIfPresent(ModelConfigDataPath(""));
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());
}

TEST(GenerationConfigTest, TransformersV5TinyModel) {
  absl::StatusOr<std::optional<GenerationConfig>> loaded = LoadGenerationConfigIfPresent(
      std::string(XSERV_TEST_DATA_DIR) + "/models/gpt-oss-tiny-mxfp4");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_THAT((*loaded)->eos_token_ids, ElementsAre(2));
  EXPECT_EQ((*loaded)->pad_token_id, 0);
}

TEST(GenerationConfigTest, Errors) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "generation_config.json"},
      {"{", "generation_config.json"},
      {R"({"eos_token_id": "2"})", "eos_token_id"},
      {R"({"eos_token_id": [1, -3]})", "eos_token_id"},
      {R"({"temperature": -1})", "temperature"},
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"top_p": 1.5})", "top_p"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_k": -1})", "top_k"},
      {R"({"min_p": 2})", "min_p"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"do_sample": "yes"})", "do_sample"},
  };
  for (const auto& [text, field] : cases) {
    absl::StatusOr<GenerationConfig> g = ParseGenerationConfig(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(field)) << text;
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("generation_config.json"));
  }
}

}  // namespace
}  // namespace xserv
