// Pipeline stages one at a time: how the layers are split, what each stage's KV cache and
// observer see, the load-time and Forward-time errors, and WeightLoader::IgnorePrefix.
#include "gmock/gmock.h"
#include "tests/unit/model/pipeline_test_util.h"
#include "worker/model/weight_loader.h"

namespace xserv::model::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<std::unique_ptr<Model>> LoadStage(const std::string& dir, kernels::Backend& backend,
                                                 int pp_rank, int pp_size) {
  return LoadModel(dir, backend,
                   ModelLoadOptions{.max_num_tokens = 64, .pp_rank = pp_rank, .pp_size = pp_size});
}

TEST(PipelineStages, FiveLayersSplitTwoTwoOne) {
  const std::string dir = PipelineModelDir("qwen3");
  if (dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  const int want_first[] = {0, 2, 4}, want_count[] = {2, 2, 1};
  for (int s = 0; s < 3; ++s) {
    kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{.num_threads = 1});
    auto model = LoadStage(dir, backend, s, 3);
    ASSERT_TRUE(model.ok()) << "stage " << s << ": " << model.status();
    const Model& m = **model;
    EXPECT_EQ(m.first_layer(), want_first[s]);
    EXPECT_EQ(m.num_local_layers(), want_count[s]);
    EXPECT_EQ(m.rank_config().num_layers, want_count[s]);
    EXPECT_EQ(m.config().num_layers, kLayers);
    EXPECT_EQ(m.is_first_stage(), s == 0);
    EXPECT_EQ(m.is_last_stage(), s == 2);
    EXPECT_EQ(m.pp_rank(), s);
    EXPECT_EQ(m.pp_size(), 3);
    auto kv = KvCache::Allocate(backend, m.rank_config(), 4, 16);
    ASSERT_TRUE(kv.ok()) << kv.status();
    EXPECT_EQ(std::ssize(kv->layers()), want_count[s]);
  }
}

// Stage 1 of 3 driven by hand: its observer names carry global layer indices, and Forward
// refuses a missing or misshapen `hidden` and the whole model's KV layers.
TEST(PipelineStages, MiddleStageNeedsHiddenAndNamesGlobalLayers) {
  const std::string dir = PipelineModelDir("qwen3");
  if (dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{.num_threads = 1});
  auto model = LoadStage(dir, backend, 1, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  auto kv = KvCache::Allocate(backend, m.rank_config(), 4, 16);
  auto full_kv = KvCache::Allocate(backend, m.config(), 4, 16);
  auto builder = BatchBuilder::Create(backend, BatchLimits{.max_tokens = 64, .block_size = 16});
  ASSERT_TRUE(kv.ok() && full_kv.ok() && builder.ok());
  const std::vector<int32_t> ids = {5, 6, 7}, table = {2};
  auto in = builder->Build(std::vector<SequenceChunk>{{.tokens = ids, .block_table = table}});
  ASSERT_TRUE(in.ok()) << in.status();
  auto hidden = backend.Allocate(kernels::DType::kF32, {3, m.config().hidden_size});
  auto wrong = backend.Allocate(kernels::DType::kF32, {2, m.config().hidden_size});
  ASSERT_TRUE(hidden.ok() && wrong.ok());
  std::vector<float> values(3 * m.config().hidden_size, 0.25f);
  ASSERT_TRUE(backend.CopyFromHost(values.data(), hidden->view()).ok());

  const absl::Status missing = m.Forward(*in, kv->layers(), kernels::Tensor{});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("pipeline stage 1 of 3 needs hidden states"));
  const absl::Status misshapen = m.Forward(*in, kv->layers(), kernels::Tensor{}, &wrong->view());
  EXPECT_EQ(misshapen.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(misshapen.message()), HasSubstr("hidden must be contiguous F32 [3, 64]"));
  const absl::Status layers = m.Forward(*in, full_kv->layers(), kernels::Tensor{}, &hidden->view());
  EXPECT_THAT(std::string(layers.message()), HasSubstr("5 KV layers for 2 model layers"));

  std::vector<std::string> names;
  m.set_activation_observer(
      [&](const std::string& name, const kernels::Tensor&) { names.push_back(name); });
  ASSERT_TRUE(m.Forward(*in, kv->layers(), kernels::Tensor{}, &hidden->view()).ok());
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "layers.2.input");
  EXPECT_EQ(names.back(), "layers.3.mlp_out");
  for (const std::string& name : names) {
    EXPECT_THAT(name, AllOf(Not(HasSubstr("layers.0.")), Not(HasSubstr("final_norm"))));
  }
  std::vector<float> out(values.size());
  ASSERT_TRUE(backend.CopyToHost(hidden->view(), out.data()).ok());
  EXPECT_NE(out, values);  // the output overwrote the input in place
}

TEST(PipelineStages, StageCountAndRankAreChecked) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{.num_threads = 1});
  const std::string dir = ModelDir("qwen3-tiny");  // 2 layers
  const absl::Status deep = LoadStage(dir, backend, 0, 3).status();
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(deep.message()), HasSubstr("pp_size 3 exceeds the model's 2 layers"));
  const absl::Status rank = LoadStage(dir, backend, 2, 2).status();
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rank.message()), HasSubstr("pp_rank 2 outside [0, pp_size 2)"));
  EXPECT_EQ(LoadStage(dir, backend, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WeightLoaderIgnorePrefix, IgnoresOnlyThePrefix) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ModelDir("qwen3-tiny"), backend);
  ASSERT_TRUE(loader.ok()) << loader.status();
  loader->IgnorePrefix("model.layers.1.");
  const std::string message(loader->Finish().message());
  EXPECT_THAT(message, HasSubstr("unexpected tensor model.layers.0.input_layernorm.weight"));
  EXPECT_THAT(message, HasSubstr("unexpected tensor model.embed_tokens.weight"));
  EXPECT_THAT(message, Not(HasSubstr("model.layers.1.")));

  loader->IgnorePrefix("model.");
  loader->Ignore("lm_head.weight");
  EXPECT_TRUE(loader->Finish().ok()) << loader->Finish();
}

// Start-up progress: increasing byte counts against a fixed checkpoint size; a single rank ends
// having read the whole checkpoint.
TEST(WeightLoaderProgress, ReportsIncreasingBytesRead) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto model = LoadModel(ModelDir("qwen3-tiny"), backend,
                         ModelLoadOptions{.on_progress = [&](uint64_t loaded, uint64_t total) {
                           calls.emplace_back(loaded, total);
                         }});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_GT(calls.size(), 10u);
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GT(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, calls[0].second);
  }
  EXPECT_EQ(calls.back().first, calls.back().second);  // one rank reads the whole checkpoint
}

}  // namespace
}  // namespace xserv::model::testing
