// xserv-engine-bench: prefill and decode throughput of a model on the CPU or CUDA backend, without
// the scheduler or HTTP (greedy, fixed lengths, argmax of the logits on the host each step).
//
//   xserv-engine-bench --model DIR [--backend cpu|cuda] [--prompt-len 128] [--gen-len 64] [--batch 1,4] [--threads N]
//                   [--repeats 3]
//
// For each batch size B: B random prompts of prompt-len tokens are prefilled in one step (after
// one unmeasured warm-up pass of the same step), then the B sequences decode gen-len tokens
// together, greedily; the fastest of --repeats such runs is reported. Prints a table and one JSON
// line (date, commit, hardware, model, config, metrics) for docs/benchmarks/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status.h"
#include "common/version.h"
#include "kernels/cpu/cpu_backend.h"
#if XSERV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "worker/model/batch_builder.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
namespace model = xserv::model;

struct BenchConfig {
  std::string model_dir;
  int prompt_len = 128;
  int gen_len = 64;
  std::vector<int> batches;
  int threads = 1;
  std::string backend = "cpu";
  bool batch_invariant = false;
  int64_t invariant_reference_rows = 256;
  int repeats = 3;
  int64_t block_size = 16;
  uint64_t seed = 0;
};

struct BatchResult {
  int batch = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_s() const { return batch * prompt_len / prefill_seconds; }
  double decode_tokens_per_s() const { return batch * gen_len / decode_seconds; }
  int prompt_len = 0, gen_len = 0;
};

// Runs steps of B sequences with fixed block tables and greedy sampling on the host.
class Runner {
 public:
  Runner(xserv::kernels::Backend& backend, model::Model& m, model::KvCache& kv,
         model::BatchBuilder& builder, const xserv::kernels::Tensor& logits)
      : backend_(backend), model_(m), kv_(kv), builder_(builder), logits_(logits) {}

  // One step: chunk s holds tokens[s] at start_position `start`. Returns argmax per sequence.
  absl::StatusOr<std::vector<int32_t>> Step(const std::vector<std::vector<int32_t>>& tokens,
                                            int32_t start,
                                            const std::vector<std::vector<int32_t>>& tables) {
    std::vector<model::SequenceChunk> chunks;
    for (size_t s = 0; s < tokens.size(); ++s) {
      chunks.push_back({.tokens = tokens[s], .start_position = start, .block_table = tables[s],
                        .logits = model::LogitsRows::kLast});
    }
    ASSIGN_OR_RETURN(model::ForwardInputs in, builder_.Build(chunks));
    const int64_t rows = static_cast<int64_t>(tokens.size());
    const xserv::kernels::Tensor logits = logits_.SliceRows(0, rows);
    RETURN_IF_ERROR(model_.Forward(in, kv_.layers(), logits));
    const int64_t vocab = logits.dim(1);
    host_.resize(static_cast<size_t>(rows * vocab));
    RETURN_IF_ERROR(backend_.CopyToHost(logits, host_.data()));
    std::vector<int32_t> next(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = host_.data() + r * vocab;
      next[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    return next;
  }

 private:
  xserv::kernels::Backend& backend_;
  model::Model& model_;
  model::KvCache& kv_;
  model::BatchBuilder& builder_;
  xserv::kernels::Tensor logits_;
  std::vector<float> host_;
};

double Seconds(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

absl::StatusOr<BatchResult> RunBatch(Runner& runner, const BenchConfig& cfg, int batch,
                                     int64_t vocab, int64_t blocks_per_seq) {
  std::mt19937_64 rng(cfg.seed + static_cast<uint64_t>(batch));
  std::vector<std::vector<int32_t>> prompts(batch), tables(batch);
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i < cfg.prompt_len; ++i) {
      prompts[s].push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    }
    for (int64_t b = 0; b < blocks_per_seq; ++b) {
      tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    }
  }
  BatchResult result{.batch = batch, .prompt_len = cfg.prompt_len, .gen_len = cfg.gen_len};
  RETURN_IF_ERROR(runner.Step(prompts, 0, tables).status());  // warm-up: page in weights
  // Best of `repeats`: the machine is shared, and the minimum is the least disturbed run.
  std::vector<std::vector<int32_t>> step_tokens(batch);
  for (int repeat = 0; repeat < cfg.repeats; ++repeat) {
    Clock::time_point begin = Clock::now();
    ASSIGN_OR_RETURN(std::vector<int32_t> next, runner.Step(prompts, 0, tables));
    const double prefill = Seconds(begin);
    begin = Clock::now();
    for (int i = 0; i < cfg.gen_len; ++i) {
      for (int s = 0; s < batch; ++s) step_tokens[s] = {next[s]};
      ASSIGN_OR_RETURN(next, runner.Step(step_tokens, cfg.prompt_len + i, tables));
    }
    const double decode = Seconds(begin);
    if (repeat == 0 || prefill < result.prefill_seconds) result.prefill_seconds = prefill;
    if (repeat == 0 || decode < result.decode_seconds) result.decode_seconds = decode;
  }
  return result;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json ReportJson(const BenchConfig& cfg, const xserv::ModelConfig& c,
                const std::vector<BatchResult>& results) {
  const xserv::BuildInfo& build = xserv::GetBuildInfo();
  Json metrics = Json::array();
  for (const BatchResult& r : results) {
    metrics.push_back({{"batch", r.batch},
                       {"prefill_tokens_per_s", r.prefill_tokens_per_s()},
                       {"decode_tokens_per_s", r.decode_tokens_per_s()},
                       {"prefill_seconds", r.prefill_seconds},
                       {"decode_ms_per_step", 1e3 * r.decode_seconds / r.gen_len}});
  }
  return Json{
      {"date", UtcNow()},
      {"commit", build.git_commit},
      {"dirty", build.git_dirty},
      {"build_type", build.build_type},
      {"hardware",
       {{"cpu", CpuModelName()},
        {"threads", cfg.threads},
        {"logical_cpus", std::thread::hardware_concurrency()}}},
      {"model",
       {{"dir", cfg.model_dir},
        {"model_type", c.model_type},
        {"checkpoint_dtype", c.torch_dtype},
        {"layers", c.num_layers},
        {"hidden", c.hidden_size},
        {"heads", c.num_heads},
        {"kv_heads", c.num_kv_heads},
        {"head_dim", c.head_dim},
        {"intermediate", c.intermediate_size},
        {"experts", c.moe.num_experts},
        {"vocab", c.vocab_size}}},
      {"config",
       {{"backend", cfg.backend},
        {"compute_dtype", cfg.backend == "cuda" ? "bf16" : "f32"},
        {"batch_invariant", cfg.batch_invariant},
        {"invariant_reference_rows", cfg.invariant_reference_rows},
        {"prompt_len", cfg.prompt_len},
        {"gen_len", cfg.gen_len},
        {"block_size", cfg.block_size},
        {"repeats", cfg.repeats},
        {"batches", cfg.batches}}},
      {"metrics", std::move(metrics)}};
}

absl::Status Run(const BenchConfig& cfg) {
  const int max_batch = *std::max_element(cfg.batches.begin(), cfg.batches.end());
  const int max_tokens = max_batch * cfg.prompt_len;
  std::unique_ptr<xserv::kernels::Backend> owned;
  if (cfg.backend == "cpu") {
    owned = std::make_unique<xserv::kernels::cpu::CpuBackend>(
        xserv::kernels::cpu::CpuBackendOptions{.num_threads = cfg.threads});
#if XSERV_HAVE_CUDA
  } else if (cfg.backend == "cuda") {
    ASSIGN_OR_RETURN(auto cuda, xserv::kernels::cuda::CudaBackend::Create(
        {.device = 0,
         .batch_invariant = cfg.batch_invariant,
         .invariant_reference_rows = cfg.invariant_reference_rows}));
    owned = std::move(cuda);
#endif
  } else {
    return absl::InvalidArgumentError("backend " + cfg.backend + " is not available in this build");
  }
  xserv::kernels::Backend& backend = *owned;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m,
                   model::LoadModel(cfg.model_dir, backend,
                                    model::ModelLoadOptions{.max_num_tokens = max_tokens}));
  const xserv::ModelConfig& c = m->config();
  if (cfg.prompt_len + cfg.gen_len > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("prompt-len + gen-len exceeds the model's ",
                                                   c.max_position_embeddings, " positions"));
  }
  const int64_t blocks_per_seq =
      (cfg.prompt_len + cfg.gen_len + cfg.block_size - 1) / cfg.block_size;
  ASSIGN_OR_RETURN(model::KvCache kv, model::KvCache::Allocate(backend, c, max_batch * blocks_per_seq,
                                                               cfg.block_size));
  ASSIGN_OR_RETURN(model::BatchBuilder builder,
                   model::BatchBuilder::Create(backend, {.max_tokens = max_tokens,
                                                         .max_seqs = max_batch,
                                                         .max_blocks_per_seq = blocks_per_seq,
                                                         .block_size = cfg.block_size}));
  ASSIGN_OR_RETURN(xserv::kernels::Buffer logits,
                   backend.Allocate(xserv::kernels::DType::kF32, {max_batch, c.vocab_size}));
  Runner runner(backend, *m, kv, builder, logits.view());

  std::vector<BatchResult> results;
  std::printf("model %s: %s, %lld layers, hidden %lld, vocab %lld; %s backend, %d threads\n",
              cfg.model_dir.c_str(), c.model_type.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
              cfg.backend.c_str(), cfg.threads);
  std::printf("%6s %7s %5s %15s %14s %15s\n", "batch", "prompt", "gen", "prefill tok/s",
              "decode tok/s", "decode ms/step");
  for (int batch : cfg.batches) {
    ASSIGN_OR_RETURN(BatchResult r, RunBatch(runner, cfg, batch, c.vocab_size, blocks_per_seq));
    std::printf("%6d %7d %5d %15.1f %14.1f %15.2f\n", r.batch, r.prompt_len, r.gen_len,
                r.prefill_tokens_per_s(), r.decode_tokens_per_s(),
                1e3 * r.decode_seconds / r.gen_len);
    std::fflush(stdout);
    results.push_back(r);
  }
  std::printf("%s\n", ReportJson(cfg, c, results).dump().c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Engine prefill and decode throughput (greedy, fixed lengths, no scheduler/HTTP)"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  BenchConfig cfg;
  cfg.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string batches = "1,4";
  app.add_option("--model", cfg.model_dir, "HF-format model directory")->required();
  app.add_option("--prompt-len", cfg.prompt_len, "prompt tokens per sequence")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--gen-len", cfg.gen_len, "decode steps per sequence")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", batches, "comma-separated batch sizes")->capture_default_str();
  app.add_option("--backend", cfg.backend, "cpu or cuda")->capture_default_str();
  app.add_option("--batch-invariant", cfg.batch_invariant,
                 "cuda: batch-invariant matmuls (xserv-worker --batch-invariant)")
      ->capture_default_str();
  app.add_option("--invariant-reference-rows", cfg.invariant_reference_rows,
                 "cuda, batch-invariant: the m each matmul's one algorithm is chosen at")
      ->capture_default_str();
  app.add_option("--threads", cfg.threads, "CPU threads")->capture_default_str()->check(
      CLI::PositiveNumber);
  app.add_option("--repeats", cfg.repeats, "measured runs per batch size; the fastest is reported")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "seed of the random prompts")->capture_default_str();
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-engine-bench")) {
    return *exit_code;
  }
  for (absl::string_view part : absl::StrSplit(batches, ',', absl::SkipEmpty())) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1) {
      spdlog::error("--batch: \"{}\" is not a positive integer", std::string(part));
      return 2;
    }
    cfg.batches.push_back(b);
  }
  if (cfg.batches.empty()) {
    spdlog::error("--batch: no batch sizes given");
    return 2;
  }
  if (absl::Status status = Run(cfg); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  return 0;
}
