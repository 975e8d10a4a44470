// Pipeline parallelism on the CPU backend: the stages of a pipeline (each its own backend, model
// and KV cache, run one after the other per step in one thread, hidden states handed on through
// host memory as the engine does) must give the logits and greedy tokens of the single-stage
// model, for every architecture, uneven splits and TP×PP (a thread per TP rank, a Gloo group per
// stage). Models are 5-layer tiny ones made by the model maker, so 3 stages split 2 + 2 + 1.
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"
#include "tests/unit/model/pipeline_test_util.h"

namespace xserv::model::testing {
namespace {

// Same fp32 operations in the same order (the stage boundary only splits a fused add + norm).
constexpr double kPpTolerance = 1e-5;
constexpr int kDecodeSteps = 3;

struct Generation {
  std::vector<std::vector<float>> logits;  // prefill (every prompt row), then one row per decode
  std::vector<int32_t> tokens;             // greedy: one per logits entry
};

// Prefill of `prompt` then kDecodeSteps greedy steps through `stages` (first to last). The block
// tables are the same on every stage: their harnesses shuffle the same free lists.
Generation Generate(const std::vector<std::unique_ptr<Harness>>& stages,
                    const std::vector<int32_t>& prompt) {
  Generation out;
  Harness& last = *stages.back();
  auto step = [&](const std::vector<SequenceChunk>& chunks) {
    std::vector<float> hidden, logits;
    for (const auto& stage : stages) logits = stage->Step(chunks, &hidden);
    return logits;
  };
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> table;
  for (const auto& stage : stages) table = stage->NewTable(std::ssize(seq) + kDecodeSteps);
  out.logits.push_back(
      step({SequenceChunk{.tokens = seq, .block_table = table, .logits = LogitsRows::kAll}}));
  for (int i = 0;; ++i) {
    const std::vector<float>& rows = out.logits.back();
    if (rows.size() < static_cast<size_t>(last.vocab())) return out;  // failed (reported)
    out.tokens.push_back(Argmax(&rows[rows.size() - last.vocab()], last.vocab()));
    if (i == kDecodeSteps) return out;
    seq.push_back(out.tokens.back());
    out.logits.push_back(step({SequenceChunk{.tokens = std::span<const int32_t>(&seq.back(), 1),
                                             .start_position = static_cast<int32_t>(seq.size() - 1),
                                             .block_table = table}}));
  }
}

// `pp` stages of TP rank `tp_rank` (of `tp`), with their TP group communicators `comms`. Odd
// stages take the fused pre-norm path (CpuBackendOptions::fuse_norm_matmul: the residual stream
// alternating between two buffers), so hand-offs from and to it are covered.
std::vector<std::unique_ptr<Harness>> LoadStages(const std::string& dir, int tp, int tp_rank,
                                                 int pp, const CommPerStage& comms) {
  std::vector<std::unique_ptr<Harness>> stages;
  for (int s = 0; s < pp; ++s) {
    stages.push_back(
        std::make_unique<Harness>(dir,
                                  ModelLoadOptions{.max_num_tokens = 256,
                                                   .tp_rank = tp_rank,
                                                   .tp_size = tp,
                                                   .tp_comm = tp > 1 ? comms[s].get() : nullptr,
                                                   .pp_rank = s,
                                                   .pp_size = pp},
                                  /*num_threads=*/1, /*num_blocks=*/64, /*block_size=*/16,
                                  KvLayout{}, /*fuse_norms=*/s % 2 == 1));
    if (!stages.back()->ok()) return {};
  }
  return stages;
}

// Runs a tp × pp grid; element r is what TP rank r's last stage generated.
std::vector<Generation> RunGrid(const std::string& dir, int tp, int pp,
                                const std::vector<int32_t>& prompt) {
  std::vector<Generation> out(tp);
  if (tp == 1) {
    const auto stages = LoadStages(dir, 1, 0, pp, {});
    if (!stages.empty()) out[0] = Generate(stages, prompt);
    return out;
  }
  // One TP group per stage; every rank creates them in stage order, so rendezvous line up.
  // Destroyed only after every thread joined, so no rank closes sockets a peer still uses.
  std::vector<CommPerStage> comms(tp);
  for (CommPerStage& stage_comms : comms) stage_comms.resize(pp);
  auto store = std::make_shared<parallel::InMemoryKeyValueStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      for (int s = 0; s < pp; ++s) {
        auto comm = CreateStageComm(store, rank, tp, absl::StrCat(TestName(), ".pp", pp, ".", s));
        ASSERT_TRUE(comm.ok()) << "rank " << rank << " stage " << s << ": " << comm.status();
        comms[rank][s] = std::move(*comm);
      }
      const auto stages = LoadStages(dir, tp, rank, pp, comms[rank]);
      ASSERT_FALSE(stages.empty()) << "rank " << rank;
      out[rank] = Generate(stages, prompt);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

struct PpCase {
  std::string model;  // an arch made with kLayers layers, or a fixture under tests/data/models
  int tp;
  int pp;
};

void PrintTo(const PpCase& c, std::ostream* os) {
  *os << c.model << " tp=" << c.tp << " pp=" << c.pp;
}

class PipelineParallel : public ::testing::TestWithParam<PpCase> {};

TEST_P(PipelineParallel, LastStageMatchesOneStage) {
  const PpCase& param = GetParam();
  const std::string dir = PipelineModelDir(param.model);
  if (dir.empty()) GTEST_SKIP() << "run scripts/fetch-assets.sh for tokenizers";
  const std::vector<int32_t> prompt = PromptFor(dir);
  const std::vector<Generation> want = RunGrid(dir, param.tp, /*pp=*/1, prompt);
  ASSERT_EQ(want[0].tokens.size(), static_cast<size_t>(kDecodeSteps + 1));
  const std::vector<Generation> got = RunGrid(dir, param.tp, param.pp, prompt);
  const int64_t vocab = VocabSize(dir);
  for (int rank = 0; rank < param.tp; ++rank) {
    ASSERT_EQ(got[rank].logits.size(), want[rank].logits.size()) << "rank " << rank;
    double worst = 0;
    for (size_t step = 0; step < want[rank].logits.size(); ++step) {
      const std::vector<float>& a = got[rank].logits[step];
      const std::vector<float>& b = want[rank].logits[step];
      ASSERT_EQ(a.size(), b.size()) << "rank " << rank << " step " << step;
      for (size_t row = 0; row * vocab < b.size(); ++row) {
        worst = std::max(worst, RowRelativeError(&a[row * vocab], &b[row * vocab], vocab));
      }
    }
    EXPECT_LE(worst, kPpTolerance) << "rank " << rank;
    EXPECT_EQ(got[rank].tokens, want[rank].tokens) << "rank " << rank;
    RecordProperty("max_relative_error_rank_" + std::to_string(rank),
                   absl::StrFormat("%.3g", worst));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, PipelineParallel,
    ::testing::Values(PpCase{"qwen3", 1, 2}, PpCase{"qwen3", 1, 3}, PpCase{"qwen3", 2, 2},
                      PpCase{"llama", 1, 2}, PpCase{"llama", 1, 3}, PpCase{"llama", 2, 2},
                      PpCase{"gpt2", 1, 2}, PpCase{"gpt2", 1, 3}, PpCase{"gpt2", 2, 2},
                      PpCase{"gpt-oss", 1, 2}, PpCase{"gpt-oss", 1, 3}, PpCase{"gpt-oss", 2, 2},
                      // Tied lm_head: the last stage loads the embedding too.
                      PpCase{"qwen3-tiny-tied-bf16", 1, 2}),
    [](const auto& info) {
      std::string name = absl::StrCat(info.param.model, "_tp", info.param.tp, "_pp", info.param.pp);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace xserv::model::testing
