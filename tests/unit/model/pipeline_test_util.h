// Helpers of the pipeline-parallel tests: deeper tiny models made once per test process, prompts,
// and the Gloo communicator of one stage's TP group.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_config/config_parser.h"
#include "tests/unit/model/model_test_util.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/kv_store.h"
#include "worker/tools/model_maker.h"

namespace xserv::model::testing {

// Enough layers for 3 uneven stages (2 + 2 + 1).
constexpr int64_t kLayers = 5;

// Owns the directory the made models live in; removed when the test process exits.
class MadeModels {
 public:
  ~MadeModels() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }

  // The kLayers-layer tiny model of `arch` (gpt2, qwen3, llama, gpt-oss), made on first use; ""
  // when its tokenizer is absent (scripts/fetch-assets.sh fetches them).
  std::string Get(const std::string& arch) {
    if (auto it = dirs_.find(arch); it != dirs_.end()) return it->second;
    auto parsed = tools::ParseModelArch(arch);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    const std::string tokenizer = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/" +
                                  (arch == "llama" ? std::string("llama3") : arch);
    std::error_code ec;
    if (!parsed.ok() || !std::filesystem::exists(tokenizer + "/tokenizer.json", ec)) return "";
    if (root_.empty()) {
      std::string pattern = ::testing::TempDir() + "xserv_pp_XXXXXX";
      if (mkdtemp(pattern.data()) != nullptr) root_ = pattern;
    }
    const std::string dir = root_ + "/" + arch;
    const absl::Status made = tools::MakeModel({.arch = *parsed,
                                                .preset = tools::ModelPreset::kTiny,
                                                .seed = 11,
                                                .tokenizer_dir = tokenizer,
                                                .out_dir = dir,
                                                .num_layers = kLayers});
    EXPECT_TRUE(made.ok()) << made;
    return dirs_[arch] = made.ok() ? dir : "";
  }

 private:
  std::string root_;
  std::map<std::string, std::string> dirs_;
};

// An arch name gives its made model; anything else names a fixture under tests/data/models.
inline std::string PipelineModelDir(const std::string& name) {
  static MadeModels made;
  if (name == "gpt2" || name == "qwen3" || name == "llama" || name == "gpt-oss") {
    return made.Get(name);
  }
  return ModelDir(name);
}

inline int64_t VocabSize(const std::string& dir) {
  auto config = LoadModelConfig(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? config->vocab_size : 0;
}

// 40 tokens: more than two KV blocks and longer than gpt-oss's 32-token window, so a stage that
// picked the window by its local layer index would differ.
inline std::vector<int32_t> PromptFor(const std::string& dir) {
  const int64_t vocab = VocabSize(dir);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < 40 && vocab > 0; ++i) {
    ids.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  }
  return ids;
}

inline std::string TestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

using CommPerStage = std::vector<std::unique_ptr<parallel::Communicator>>;

// Rank `rank` of a `size`-rank Gloo group over loopback, keys under `prefix` in `store`.
inline absl::StatusOr<std::unique_ptr<parallel::Communicator>> CreateStageComm(
    std::shared_ptr<parallel::KeyValueStore> store, int rank, int size, const std::string& prefix) {
  return parallel::CreateGlooCommunicator(
      parallel::GlooOptions{.rank = rank,
                            .world_size = size,
                            .store = std::move(store),
                            .prefix = prefix,
                            .timeout = std::chrono::seconds(20)});
}

}  // namespace xserv::model::testing
