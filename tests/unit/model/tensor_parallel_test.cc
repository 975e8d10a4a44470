// Tensor parallelism on the CPU backend: the ranks of a TP group (threads of this process, Gloo
// over loopback TCP, each with its own backend, model shard and KV cache) must give the logits
// and greedy tokens of the unsharded model; plus the sliced weight loads and the load-time errors.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/model_config/config_parser.h"
#include "gmock/gmock.h"
#include "tests/unit/model/model_test_util.h"
#include "worker/model/weight_loader.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/kv_store.h"

namespace xserv::model::testing {
namespace {

using ::testing::HasSubstr;

// fp32 on both sides; only the order of the partial sums differs.
constexpr double kTpTolerance = 1e-4;
constexpr size_t kPromptTokens = 20;
constexpr int kDecodeSteps = 3;

struct Generation {
  std::vector<std::vector<float>> logits;  // prefill (every prompt row), then one row per decode
  std::vector<int32_t> tokens;             // greedy: one per logits entry
};

std::vector<int32_t> Prompt(const std::string& model) {
  const Golden g = LoadGolden(ModelDir(model));
  EXPECT_FALSE(g.inputs.empty());
  if (g.inputs.empty()) return {};
  const auto& ids = g.inputs[0];
  return {ids.begin(), ids.begin() + std::min(kPromptTokens, ids.size())};
}

// Prefill of `prompt`, then kDecodeSteps greedy decode steps.
Generation Generate(Harness& h, const std::vector<int32_t>& prompt) {
  Generation out;
  std::vector<int32_t> seq = prompt;
  const std::vector<int32_t> table = h.NewTable(static_cast<int64_t>(seq.size()) + kDecodeSteps);
  out.logits.push_back(
      h.Step({SequenceChunk{.tokens = seq, .block_table = table, .logits = LogitsRows::kAll}}));
  for (int step = 0;; ++step) {
    const std::vector<float>& rows = out.logits.back();
    if (rows.size() < static_cast<size_t>(h.vocab())) return out;  // the step failed (reported)
    out.tokens.push_back(Argmax(&rows[rows.size() - h.vocab()], h.vocab()));
    if (step == kDecodeSteps) return out;
    seq.push_back(out.tokens.back());
    out.logits.push_back(
        h.Step({SequenceChunk{.tokens = std::span<const int32_t>(&seq.back(), 1),
                              .start_position = static_cast<int32_t>(seq.size() - 1),
                              .block_table = table}}));
  }
}

// Runs `tp` ranks as threads; rank r's generation is element r.
std::vector<Generation> GenerateSharded(const std::string& model, int tp,
                                        const std::vector<int32_t>& prompt) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto store = std::make_shared<parallel::InMemoryKeyValueStore>();
  std::vector<Generation> out(tp);
  // Destroyed only after every thread joined, so no rank closes sockets a peer still uses.
  std::vector<std::unique_ptr<parallel::Communicator>> comms(tp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = parallel::CreateGlooCommunicator(
          parallel::GlooOptions{.rank = rank,
                                .world_size = tp,
                                .store = store,
                                .prefix = std::string(info->test_suite_name()) + "." + info->name(),
                                .timeout = std::chrono::seconds(20)});
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      comms[rank] = std::move(*comm);
      // Odd ranks take the fused pre-norm path (CpuBackendOptions::fuse_norm_matmul).
      Harness h(
          ModelDir(model),
          ModelLoadOptions{
              .max_num_tokens = 256, .tp_rank = rank, .tp_size = tp, .tp_comm = comms[rank].get()},
          /*num_threads=*/1, /*num_blocks=*/64, /*block_size=*/16, KvLayout{},
          /*fuse_norms=*/rank % 2 == 1);
      ASSERT_TRUE(h.ok()) << "rank " << rank;
      EXPECT_EQ(h.model().rank_config().num_heads, h.model().config().num_heads / tp);
      out[rank] = Generate(h, prompt);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

struct TpCase {
  std::string model;
  int tp;
};

void PrintTo(const TpCase& c, std::ostream* os) { *os << c.model << " tp=" << c.tp; }

class TensorParallel : public ::testing::TestWithParam<TpCase> {};

// Every rank's logits and greedy tokens against one unsharded rank, for `prompt`.
void ExpectRanksMatchUnsharded(const TpCase& param, const std::vector<int32_t>& prompt) {
  Harness single(ModelDir(param.model), ModelLoadOptions{.max_num_tokens = 256},
                 /*num_threads=*/1);
  ASSERT_TRUE(single.ok());
  const Generation want = Generate(single, prompt);
  ASSERT_EQ(want.tokens.size(), static_cast<size_t>(kDecodeSteps + 1));
  const int64_t vocab = single.vocab();

  const std::vector<Generation> ranks = GenerateSharded(param.model, param.tp, prompt);
  for (int rank = 0; rank < param.tp; ++rank) {
    const Generation& got = ranks[rank];
    ASSERT_EQ(got.logits.size(), want.logits.size()) << "rank " << rank;
    double worst = 0;
    for (size_t step = 0; step < want.logits.size(); ++step) {
      ASSERT_EQ(got.logits[step].size(), want.logits[step].size()) << "rank " << rank;
      for (size_t row = 0; row * vocab < want.logits[step].size(); ++row) {
        worst = std::max(worst, RowRelativeError(&got.logits[step][row * vocab],
                                                 &want.logits[step][row * vocab], vocab));
      }
    }
    EXPECT_LE(worst, kTpTolerance) << "rank " << rank;
    EXPECT_EQ(got.tokens, want.tokens) << "rank " << rank;
    ::testing::Test::RecordProperty("max_relative_error_rank_" + std::to_string(rank),
                                    absl::StrFormat("%.3g", worst));
  }
}

TEST_P(TensorParallel, EveryRankMatchesUnsharded) {
  const std::vector<int32_t> prompt = Prompt(GetParam().model);
  ASSERT_EQ(prompt.size(), kPromptTokens);
  ExpectRanksMatchUnsharded(GetParam(), prompt);
}

// Tokens from every rank's share of a vocab-parallel embedding, its first and last rows included
// (a token outside a rank's rows must read its zero row there).
TEST_P(TensorParallel, PromptFromEveryVocabShard) {
  const absl::StatusOr<ModelConfig> config = LoadModelConfig(ModelDir(GetParam().model));
  ASSERT_TRUE(config.ok()) << config.status();
  const int64_t v = config->vocab_size;
  std::vector<int32_t> prompt;
  for (int64_t id : {int64_t{0}, v / 4 - 1, v / 4, v / 2 - 1, v / 2, 3 * v / 4 - 1, 3 * v / 4,
                     v - 1, int64_t{1}, v - 2}) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  ExpectRanksMatchUnsharded(GetParam(), prompt);
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, TensorParallel,
    ::testing::Values(TpCase{"qwen3-tiny", 2}, TpCase{"qwen3-tiny", 4},  // 4: KV heads replicated
                      TpCase{"qwen3-tiny-tied-bf16", 2}, TpCase{"llama3-tiny-sharded", 2},
                      TpCase{"llama3-tiny-sharded", 4}, TpCase{"gpt2-tiny", 2},
                      TpCase{"gpt2-tiny", 4}, TpCase{"gpt-oss-tiny-mxfp4", 2},
                      TpCase{"gpt-oss-tiny-mxfp4", 4}),
    [](const auto& info) {
      std::string name = info.param.model + "_tp" + std::to_string(info.param.tp);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// Slices read exactly the selected elements, and only their bytes are counted.
TEST(WeightLoaderSlice, RowsColumnsAndFusedBlocks) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ModelDir("qwen3-tiny"), backend);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const std::string name = "model.layers.0.mlp.down_proj.weight";  // [64, 128] f32
  const std::vector<float> full = testing::ToHost(backend, loader->Take(name, {64, 128}));
  const uint64_t full_bytes = loader->bytes_loaded();
  EXPECT_EQ(full_bytes, 64u * 128u * 4u);

  const TensorSlice columns{.dim = 1, .ranges = {{.begin = 32, .end = 64}}};
  const kernels::Buffer cols = loader->Take(name, {64, 128}, columns);
  ASSERT_FALSE(cols.empty());
  EXPECT_EQ(cols.view().dim(0), 64);
  EXPECT_EQ(cols.view().dim(1), 32);
  EXPECT_EQ(loader->bytes_loaded() - full_bytes, 64u * 32u * 4u);
  const std::vector<float> got_cols = testing::ToHost(backend, cols);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 32; ++c) ASSERT_EQ(got_cols[r * 32 + c], full[r * 128 + 32 + c]);
  }

  const TensorSlice blocks{.dim = 0, .ranges = {{.begin = 2, .end = 4}, {.begin = 60, .end = 61}}};
  const std::vector<float> got_rows = testing::ToHost(backend, loader->Take(name, {64, 128}, blocks));
  ASSERT_EQ(got_rows.size(), 3u * 128u);
  for (int c = 0; c < 128; ++c) {
    EXPECT_EQ(got_rows[c], full[2 * 128 + c]);
    EXPECT_EQ(got_rows[128 + c], full[3 * 128 + c]);
    EXPECT_EQ(got_rows[256 + c], full[60 * 128 + c]);
  }

  // A slice outside the tensor is a recorded load problem, not a crash.
  EXPECT_TRUE(loader->Take(name, {64, 128}, TensorSlice{.dim = 1, .ranges = {{0, 129}}}).empty());
  EXPECT_THAT(std::string(loader->Finish().message()), HasSubstr("bad slice of dim 1"));
}

TEST(WeightLoaderSlice, TransposedSliceRefersToTheResultLayout) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto loader = WeightLoader::Open(ModelDir("gpt2-tiny"), backend);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const std::string name = "transformer.h.1.attn.c_attn.weight";  // stored [64, 192]
  const std::vector<float> full = testing::ToHost(backend, loader->TakeTransposed(name, 192, 64));
  // Rank 1 of 2: features [32, 64) of each of q, k and v.
  const TensorSlice qkv{.dim = 0, .ranges = {{32, 64}, {96, 128}, {160, 192}}};
  const std::vector<float> got = testing::ToHost(backend, loader->TakeTransposed(name, 192, 64, qkv));
  ASSERT_EQ(got.size(), 96u * 64u);
  for (int block = 0; block < 3; ++block) {
    for (int r = 0; r < 32; ++r) {
      for (int c = 0; c < 64; ++c) {
        ASSERT_EQ(got[(block * 32 + r) * 64 + c], full[(block * 64 + 32 + r) * 64 + c]);
      }
    }
  }
}

// A communicator that only answers rank() and world_size(): enough for load-time validation.
class NoopCommunicator final : public parallel::Communicator {
 public:
  NoopCommunicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(std::span<float>, parallel::ReduceOp) override { return Unused(); }
  absl::Status AllGather(std::span<const float>, std::span<float>) override { return Unused(); }
  absl::Status Broadcast(std::span<std::byte>, int) override { return Unused(); }
  absl::Status Send(std::span<const std::byte>, int, int) override { return Unused(); }
  absl::Status Recv(std::span<std::byte>, int, int) override { return Unused(); }
  absl::Status Barrier() override { return Unused(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not for Forward"); }
  int rank_, world_size_;
};

// A model directory holding only qwen3-tiny's config.json with each `from` replaced by its
// `to`: the options are checked against the config before any weight is opened.
std::string ConfigOnlyDir(const std::string& name,
                          const std::vector<std::pair<std::string, std::string>>& edits) {
  std::ifstream in(ModelDir("qwen3-tiny") + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  for (const auto& [from, to] : edits) {
    const size_t at = config.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) config.replace(at, from.size(), to);
  }
  const std::string dir = ::testing::TempDir() + "/tp_" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  return dir;
}

absl::Status LoadStatus(const std::string& dir, int rank, int size, parallel::Communicator* comm) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  return LoadModel(dir, backend,
                   ModelLoadOptions{
                       .max_num_tokens = 16, .tp_rank = rank, .tp_size = size, .tp_comm = comm})
      .status();
}

TEST(TensorParallelErrors, ShapesThatDoNotSplitNameTheDimension) {
  NoopCommunicator comm3(0, 3);
  const absl::Status heads = LoadStatus(ModelDir("qwen3-tiny"), 0, 3, &comm3);
  EXPECT_EQ(heads.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(heads.message()),
              HasSubstr("num_attention_heads 4 is not divisible by tp_size 3"));

  NoopCommunicator comm2(1, 2);
  const absl::Status inter = LoadStatus(
      ConfigOnlyDir("inter", {{"\"intermediate_size\": 128", "\"intermediate_size\": 129"}}), 1, 2,
      &comm2);
  EXPECT_EQ(inter.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(inter.message()),
              HasSubstr("intermediate_size 129 is not divisible by tp_size 2"));

  // 12 heads split 3 ways, but 4 KV heads neither split 3 ways nor replicate evenly.
  const std::string kv_dir =
      ConfigOnlyDir("kv", {{"\"num_attention_heads\": 4", "\"num_attention_heads\": 12"},
                           {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4"}});
  const absl::Status kv = LoadStatus(kv_dir, 0, 3, &comm3);
  EXPECT_EQ(kv.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(kv.message()),
              HasSubstr("num_key_value_heads 4 and tp_size 3 must divide one another"));
}

TEST(TensorParallelErrors, CommunicatorAndRankAreChecked) {
  const absl::Status no_comm = LoadStatus(ModelDir("qwen3-tiny"), 0, 2, nullptr);
  EXPECT_EQ(no_comm.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_comm.message()), HasSubstr("needs a communicator"));

  NoopCommunicator wrong_rank(0, 2);
  const absl::Status mismatch = LoadStatus(ModelDir("qwen3-tiny"), 1, 2, &wrong_rank);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mismatch.message()), HasSubstr("communicator is rank 0 of 2"));

  const absl::Status rank = LoadStatus(ModelDir("qwen3-tiny"), 2, 2, &wrong_rank);
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rank.message()), HasSubstr("tp_rank 2 outside [0, tp_size 2)"));
}

}  // namespace
}  // namespace xserv::model::testing
