// xserv-make-model's library: every architecture's tiny preset, with the real tokenizers, writes a
// directory our LoadModel accepts and runs; outputs are deterministic in the seed.
#include <cmath>
#include <string>
#include <vector>

#include "common/model_config/config_parser.h"
#include "common/model_config/generation_config.h"
#include "common/safetensors/safetensors_file.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model/model_test_util.h"
#include "tests/unit/tools/tools_test_util.h"
#include "worker/tools/model_maker.h"

namespace xserv::tools {
namespace {

using ::testing::ElementsAre;
using testing::ReadFileBytes;
using testing::ScratchDir;
using testing::TokenizerDir;

struct ArchCase {
  ModelArch arch;
  const char* tokenizer;
  Architecture expected;
  std::vector<int64_t> eos;
  std::optional<int64_t> bos;
};

void PrintTo(const ArchCase& c, std::ostream* os) { *os << ModelArchName(c.arch); }

class MakeModelArchTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(MakeModelArchTest, TinyPresetLoadsAndRuns) {
  const ArchCase& c = GetParam();
  const std::string tokenizer_dir = TokenizerDir(c.tokenizer);
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  const std::string dir = tmp / "model";
  ASSERT_TRUE(MakeModel({.arch = c.arch,
                         .preset = ModelPreset::kTiny,
                         .seed = 7,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = dir})
                  .ok());

  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, c.expected);
  auto tok = tokenizer::Tokenizer::FromFile(dir);  // the copied tokenizer files
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(config->vocab_size % 64, 0);
  EXPECT_GE(config->vocab_size, (*tok)->vocab_size());
  EXPECT_LT(config->vocab_size, (*tok)->vocab_size() + 64);
  EXPECT_EQ(config->eos_token_ids.front(), c.eos.front());
  auto generation = LoadGenerationConfigIfPresent(dir);
  ASSERT_TRUE(generation.ok() && generation->has_value()) << generation.status();
  EXPECT_EQ((*generation)->eos_token_ids, c.eos);
  EXPECT_EQ((*generation)->bos_token_id, c.bos);
  if (c.arch == ModelArch::kGptOss) {
    EXPECT_EQ(config->quantization.method, QuantMethod::kMxfp4);
    EXPECT_EQ(config->rope.scaling.type, RopeScalingType::kYarn);
    EXPECT_EQ(config->layer_types[0], AttentionType::kSliding);
    EXPECT_EQ(config->layer_types[1], AttentionType::kFull);
  }
  if (c.arch == ModelArch::kQwen3) {
    EXPECT_TRUE(config->qk_norm);
    EXPECT_FALSE(config->tie_word_embeddings);
  }

  // Prefill 40 tokens (more than two KV blocks and the gpt-oss window) then decode one.
  model::testing::Harness h(dir);
  ASSERT_TRUE(h.ok());
  const int64_t vocab = h.vocab();
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  const std::vector<int32_t> table = h.NewTable(64);
  const std::vector<float> prefill = h.Step({{.tokens = ids, .start_position = 0,
                                              .block_table = table,
                                              .logits = model::LogitsRows::kAll}});
  ASSERT_EQ(prefill.size(), ids.size() * vocab);
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(prefill[0], prefill[1]);
  const std::vector<int32_t> next = {model::testing::Argmax(prefill.data() + 39 * vocab, vocab)};
  const std::vector<float> decode = h.Step({{.tokens = next, .start_position = 40,
                                             .block_table = table}});
  ASSERT_EQ(static_cast<int64_t>(decode.size()), vocab);
  for (float v : decode) ASSERT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(
    AllArchs, MakeModelArchTest,
    ::testing::Values(
        ArchCase{ModelArch::kGpt2, "gpt2", Architecture::kGpt2, {50256}, 50256},
        ArchCase{ModelArch::kQwen3, "qwen3", Architecture::kQwen3, {151645, 151643}, 151643},
        ArchCase{ModelArch::kLlama, "llama3", Architecture::kLlama, {128009}, 128000},
        ArchCase{ModelArch::kGptOss, "gpt-oss", Architecture::kGptOss, {200002, 199999},
                 199998}),
    [](const ::testing::TestParamInfo<ArchCase>& info) {
      return info.param.arch == ModelArch::kGptOss ? std::string("gpt_oss")
                                                   : std::string(ModelArchName(info.param.arch));
    });

TEST(MakeModelTest, SameSeedGivesIdenticalFilesOtherSeedOtherWeights) {
  const std::string tokenizer_dir = TokenizerDir("gpt2");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  for (const auto& [name, seed] : {std::pair{"a", 3}, std::pair{"b", 3}, std::pair{"c", 4}}) {
    ASSERT_TRUE(MakeModel({.arch = ModelArch::kGpt2,
                           .preset = ModelPreset::kTiny,
                           .seed = static_cast<uint64_t>(seed),
                           .tokenizer_dir = tokenizer_dir,
                           .out_dir = tmp / name})
                    .ok());
  }
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(ReadFileBytes(tmp / "a/" + file), ReadFileBytes(tmp / "b/" + file)) << file;
  }
  EXPECT_EQ(ReadFileBytes(tmp / "a/config.json"), ReadFileBytes(tmp / "c/config.json"));
  auto a = safetensors::SafetensorsFile::Open(tmp / "a/model.safetensors");
  auto c = safetensors::SafetensorsFile::Open(tmp / "c/model.safetensors");
  ASSERT_TRUE(a.ok() && c.ok());
  ASSERT_EQ(a->TensorNames(), c->TensorNames());
  for (const std::string& name : a->TensorNames()) {
    const auto ta = a->Tensor(name), tc = c->Tensor(name);
    ASSERT_EQ(ta->shape, tc->shape) << name;
    EXPECT_FALSE(std::equal(ta->data.begin(), ta->data.end(), tc->data.begin())) << name;
  }
}

TEST(MakeModelTest, F32DtypeAndHfMetadata) {
  const std::string tokenizer_dir = TokenizerDir("qwen3");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  ASSERT_TRUE(MakeModel({.arch = ModelArch::kQwen3,
                         .preset = ModelPreset::kTiny,
                         .seed = 1,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = tmp.path(),
                         .dtype = safetensors::DType::kF32})
                  .ok());
  auto file = safetensors::SafetensorsFile::Open(tmp / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");  // transformers requires it
  auto norm = file->Tensor("model.layers.0.self_attn.q_norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype, safetensors::DType::kF32);
  EXPECT_THAT(norm->shape, ElementsAre(32));
  EXPECT_TRUE(file->Contains("lm_head.weight"));
  auto config = LoadModelConfig(tmp.path());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->torch_dtype, "float32");
  EXPECT_EQ(config->rope.theta, 1000000.0);
}

TEST(MakeModelTest, PaddedVocabAndBadTokenizer) {
  EXPECT_EQ(PaddedVocabSize(151669), 151680);
  EXPECT_EQ(PaddedVocabSize(128256), 128256);
  EXPECT_EQ(PaddedVocabSize(50257), 50304);
  ScratchDir tmp;
  const absl::Status status = MakeModel({.arch = ModelArch::kGpt2,
                                         .preset = ModelPreset::kTiny,
                                         .tokenizer_dir = tmp / "nowhere",
                                         .out_dir = tmp / "out"});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("tokenizer"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace xserv::tools
