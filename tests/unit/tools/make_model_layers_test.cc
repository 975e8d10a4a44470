// xserv-make-model's layer-count override (--num-layers, MakeModelOptions::num_layers): deeper
// tiny models for the pipeline-parallel tests, through the library and through the binary.
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "common/model_config/config_parser.h"
#include "common/safetensors/safetensors_file.h"
#include "gtest/gtest.h"
#include "tests/unit/tools/tools_test_util.h"
#include "worker/tools/model_maker.h"

namespace xserv::tools {
namespace {

using testing::ReadFileBytes;
using testing::ScratchDir;
using testing::TokenizerDir;

TEST(MakeModelLayersTest, OverridesThePresetLayerCount) {
  const std::string tokenizer_dir = TokenizerDir("qwen3");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  ASSERT_TRUE(MakeModel({.arch = ModelArch::kQwen3,
                         .preset = ModelPreset::kTiny,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = tmp.path(),
                         .num_layers = 5})
                  .ok());
  auto config = LoadModelConfig(tmp.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_layers, 5);
  auto file = safetensors::SafetensorsFile::Open(tmp / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->Contains("model.layers.4.mlp.down_proj.weight"));
  EXPECT_FALSE(file->Contains("model.layers.5.mlp.down_proj.weight"));

  const absl::Status negative = MakeModel({.arch = ModelArch::kQwen3,
                                           .tokenizer_dir = tokenizer_dir,
                                           .out_dir = tmp / "neg",
                                           .num_layers = -1});
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
}

// MakeModelOptions::hidden_size: Qwen3 and Llama rows of another width (the heads keep theirs);
// other architectures, and sizes not a multiple of 8, are refused.
TEST(MakeModelLayersTest, OverridesThePresetHiddenSize) {
  const std::string tokenizer_dir = TokenizerDir("qwen3");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  ASSERT_TRUE(MakeModel({.arch = ModelArch::kQwen3,
                         .preset = ModelPreset::kTiny,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = tmp.path(),
                         .hidden_size = 1024})
                  .ok());
  auto config = LoadModelConfig(tmp.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 1024);
  auto file = safetensors::SafetensorsFile::Open(tmp / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto q = file->Tensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->shape, (std::vector<int64_t>{config->num_heads * config->head_dim, 1024}));
  for (const auto& [arch, hidden] : {std::pair{ModelArch::kGpt2, int64_t{1024}},
                                     std::pair{ModelArch::kQwen3, int64_t{1020}}}) {
    EXPECT_EQ(MakeModel({.arch = arch,
                         .tokenizer_dir = tokenizer_dir,
                         .out_dir = tmp / "refused",
                         .hidden_size = hidden})
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Runs xserv-make-model with `args`; returns its exit status.
int RunMakeModel(const ScratchDir& tmp, const std::string& args) {
  const std::string command =
      std::string(XSERV_MAKE_MODEL_BIN) + " " + args + " > " + (tmp / "out.txt") + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MakeModelLayersTest, CommandLineFlag) {
  const std::string tokenizer_dir = TokenizerDir("gpt2");
  if (tokenizer_dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  ScratchDir tmp;
  const std::string common = "--arch gpt2 --preset tiny --seed 1 --tokenizer " + tokenizer_dir;
  ASSERT_EQ(RunMakeModel(tmp, common + " --num-layers 3 --out " + (tmp / "m")), 0)
      << ReadFileBytes(tmp / "out.txt");
  auto config = LoadModelConfig(tmp / "m");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_layers, 3);
  EXPECT_NE(RunMakeModel(tmp, common + " --num-layers 0 --out " + (tmp / "zero")), 0);
}

}  // namespace
}  // namespace xserv::tools
