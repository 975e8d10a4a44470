// xserv-engine-bench: prefill and decode throughput of a model on the CPU or CUDA backend, without
// the scheduler or HTTP (greedy, fixed lengths, the arg-max taken by the backend's Sample).
//
//   xserv-engine-bench --model DIR [--backend cpu|cuda] [--prompt-len 128] [--gen-len 64] [--batch 1,4] [--threads N]
//                   [--repeats 3] [--profile-ops]
//
// For each batch size B: B random prompts of prompt-len tokens are prefilled in one step (after
// one unmeasured warm-up pass of the same step), then the B sequences decode gen-len tokens
// together, greedily; the fastest of --repeats such runs is reported. Prints a table and one JSON
// line (date, commit, hardware, model, config, metrics) for docs/benchmarks/. With --profile-ops
// (cuda) one more prefill + decode run per batch size measures each op's GPU time with the host's
// launch overhead taken out (CudaBackend::HoldForProfile), and the host time to queue a step: the
// per-op table says which kernels a step's time goes to, and whether the host keeps up; a
// roofline per kernel family (matmul, attention, and experts for MoE models: tools/roofline.h)
// gives the bound the peaks imply (--peak-read-gbs, --peak-tflops) and the fraction of it each
// phase reached.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
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
#include "kernels/cuda/gemv.h"
#endif
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "worker/model/batch_builder.h"
#include "worker/model/decode_graphs.h"
#include "worker/model/kv_cache.h"
#include "worker/model/model.h"
#include "worker/kernel_choices.h"
#include "worker/tools/roofline.h"

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
  bool profile_ops = false;
  bool cuda_graphs = true;
  int64_t hold_us = 50000;  // must exceed the host time to queue one step
  bool quantize_fp8 = false;   // --quantization fp8: 128 x 128 blocks on load
  bool fp8_matmuls = false;    // keep FP8 weights FP8 (MatmulFp8)
  bool fp8_lm_head = false;    // the lm_head through FP8 too
  bool fp8_kv_cache = false;   // E4M3 KV codes with (token, kv head) scales (KvLayout::fp8)
  xserv::worker::KernelChoices kernels;
  double peak_read_gb_s = 4220;     // --profile-ops roofline: ../shared/GPU.md's measured H200
  double peak_bf16_tflop_s = 790;   // read bandwidth and bf16 GEMM rate
  double peak_fp8_tflop_s = 1580;   // FP8 tensor cores (W8A8): twice bf16, not measured
};

struct BatchResult {
  int batch = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_s() const { return batch * prompt_len / prefill_seconds; }
  double decode_tokens_per_s() const { return batch * gen_len / decode_seconds; }
  int prompt_len = 0, gen_len = 0;
  Json profile;  // --profile-ops: per phase, per op GPU time
};

// Runs steps of B sequences with fixed block tables and greedy sampling on the backend.
class Runner {
 public:
  Runner(xserv::kernels::Backend& backend, model::Model& m, model::KvCache& kv,
         model::BatchBuilder& builder, const xserv::kernels::Tensor& logits)
      : backend_(backend), model_(m), kv_(kv), builder_(builder), logits_(logits) {}

  // Decode steps replay graphs through `graphs` when set (not owned).
  void set_graphs(model::DecodeGraphs* graphs) { graphs_ = graphs; }
  // Called after a step's inputs are uploaded, just before its forward is queued (profiling).
  void set_before_forward(std::function<absl::Status()> hook) { before_forward_ = std::move(hook); }
  // Host time spent queueing forwards since the last call (the launch overhead of the steps).
  double TakeEnqueueSeconds() { return std::exchange(enqueue_seconds_, 0.0); }

  // One step: chunk s holds tokens[s] at start_position `start`. Returns argmax per sequence.
  absl::StatusOr<std::vector<int32_t>> Step(const std::vector<std::vector<int32_t>>& tokens,
                                            int32_t start,
                                            const std::vector<std::vector<int32_t>>& tables) {
    std::vector<model::SequenceChunk> chunks;
    for (size_t s = 0; s < tokens.size(); ++s) {
      chunks.push_back({.tokens = tokens[s], .start_position = start, .block_table = tables[s],
                        .logits = model::LogitsRows::kLast});
    }
    const int64_t rows = static_cast<int64_t>(tokens.size());
    const xserv::kernels::Tensor logits = logits_.SliceRows(0, rows);
    if (graphs_ != nullptr && graphs_->Accepts(chunks)) {
      const Clock::time_point begin = Clock::now();
      RETURN_IF_ERROR(graphs_->Run(chunks, logits_));
      enqueue_seconds_ += std::chrono::duration<double>(Clock::now() - begin).count();
    } else {
      ASSIGN_OR_RETURN(model::ForwardInputs in, builder_.Build(chunks));
      if (before_forward_) RETURN_IF_ERROR(before_forward_());
      const Clock::time_point begin = Clock::now();
      RETURN_IF_ERROR(model_.Forward(in, kv_.layers(), logits));
      enqueue_seconds_ += std::chrono::duration<double>(Clock::now() - begin).count();
    }
    std::vector<xserv::kernels::SampleRowSpec> specs(static_cast<size_t>(rows));
    for (auto& spec : specs) {
      spec.mode = xserv::kernels::SampleMode::kDraw;
      spec.temperature = 0.0f;
    }
    std::vector<xserv::kernels::SampleRowResult> sampled(specs.size());
    RETURN_IF_ERROR(backend_.Sample(logits, specs, sampled));
    std::vector<int32_t> next;
    for (const auto& r : sampled) next.push_back(r.token);
    return next;
  }

 private:
  xserv::kernels::Backend& backend_;
  model::Model& model_;
  model::KvCache& kv_;
  model::BatchBuilder& builder_;
  xserv::kernels::Tensor logits_;
  std::function<absl::Status()> before_forward_;
  model::DecodeGraphs* graphs_ = nullptr;
  double enqueue_seconds_ = 0;
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

#if XSERV_HAVE_CUDA
// One family's line of the roofline report: what the phase must move and compute, the bound
// that implies at the device's peaks, and how close the measured GPU time came.
Json FamilyRoofline(const char* family, const xserv::tools::FamilyCost& cost,
                    const xserv::tools::DevicePeaks& peaks, double measured_us) {
  const double bound_us = xserv::tools::RooflineUs(cost, peaks);
  const double fraction = xserv::tools::RooflineFraction(cost, peaks, measured_us);
  const double flops = cost.flops + cost.fp8_flops;  // "tflop": all of them, as before FP8
  std::printf("    roofline %-9s %8.3f GB %9.3f TFLOP", family, cost.bytes / 1e9, flops / 1e12);
  if (cost.fp8_flops > 0) std::printf(" (%.3f FP8)", cost.fp8_flops / 1e12);
  std::printf(": bound %8.1f us, measured %8.1f us (%.0f%%)\n", bound_us, measured_us,
              100 * fraction);
  Json out{{"gb", cost.bytes / 1e9},
           {"tflop", flops / 1e12},
           {"bound_us", bound_us},
           {"measured_us", measured_us},
           {"fraction_of_roofline", fraction},
           {"gb_s", measured_us > 0 ? cost.bytes / (measured_us * 1e3) : 0.0},
           {"tflop_s", measured_us > 0 ? flops / (measured_us * 1e6) : 0.0}};
  if (cost.fp8_flops > 0) out["fp8_tflop"] = cost.fp8_flops / 1e12;
  return out;
}

// One phase's profile: per-op GPU time per step and the host's queueing time per step.
// `shape` gives the roofline report (with an experts family for MoE models).
absl::StatusOr<Json> PhaseProfile(xserv::kernels::cuda::CudaBackend& cuda, Runner& runner,
                                  int steps, const BenchConfig& cfg, const xserv::ModelConfig& c,
                                  const xserv::tools::PhaseShape* shape, const char* phase) {
  ASSIGN_OR_RETURN(std::vector<xserv::kernels::cuda::OpTime> ops, cuda.TakeOpProfile());
  const double enqueue_us = 1e6 * runner.TakeEnqueueSeconds() / steps;
  double gpu_us = 0, matmul_us = 0, attention_us = 0, experts_us = 0;
  for (const auto& op : ops) {
    gpu_us += 1e3 * op.total_ms / steps;
    // Matmul time: "Matmul", "MatmulFp8" and their per-shape lines ("Matmul 4096x12288"), the
    // GEMV with the norm in its prologue ("AddRmsNormMatmul NxK"), and the FP8 paths' activation
    // quantiser and weight decoder.
    const bool matmul = op.op.rfind("Matmul", 0) == 0 || op.op.rfind("AddRmsNormMatmul", 0) == 0 ||
                        op.op == "QuantizeFp8Rows" || op.op == "DequantizeFp8";
    if (matmul) matmul_us += 1e3 * op.total_ms / steps;
    if (op.op == "Attention") attention_us += 1e3 * op.total_ms / steps;
    if (op.op == "Experts") experts_us += 1e3 * op.total_ms / steps;
  }
  std::printf("  %s: GPU %.1f us/step (ops back to back), host queueing %.1f us/step\n", phase,
              gpu_us, enqueue_us);
  Json rows = Json::array();
  for (const auto& op : ops) {
    const double us = 1e3 * op.total_ms / steps;
    // Ops that declare the bytes they stream (a matmul's weights) get their bandwidth too.
    const double gb_s = op.bytes > 0 && op.total_ms > 0 ? op.bytes / (op.total_ms * 1e-3) / 1e9 : 0;
    std::printf("    %-24s %7.1f calls %9.1f us %5.1f%%", op.op.c_str(),
                static_cast<double>(op.calls) / steps, us, 100 * us / gpu_us);
    if (gb_s > 0) std::printf("  %7.0f GB/s", gb_s);
    std::printf("\n");
    rows.push_back({{"op", op.op},
                    {"calls_per_step", static_cast<double>(op.calls) / steps},
                    {"us_per_step", us}});
    if (gb_s > 0) rows.back()["gb_s"] = gb_s;
  }
  Json out{{"gpu_us_per_step", gpu_us}, {"host_enqueue_us_per_step", enqueue_us}, {"ops", rows}};
  if (shape != nullptr) {
    const xserv::tools::DevicePeaks peaks{.read_gb_s = cfg.peak_read_gb_s,
                                          .bf16_tflop_s = cfg.peak_bf16_tflop_s,
                                          .fp8_tflop_s = cfg.peak_fp8_tflop_s};
    out["roofline"] = Json{
        {"peaks",
         {{"read_gb_s", peaks.read_gb_s},
          {"bf16_tflop_s", peaks.bf16_tflop_s},
          {"fp8_tflop_s", peaks.fp8_tflop_s}}},
        {"matmul", FamilyRoofline("matmul", xserv::tools::MatmulCost(c, *shape), peaks,
                                  matmul_us)},
        {"attention", FamilyRoofline("attention", xserv::tools::AttentionCost(c, *shape), peaks,
                                     attention_us)}};
    if (c.moe.IsMoe()) {
      out["roofline"]["experts"] =
          FamilyRoofline("experts", xserv::tools::ExpertsCost(c, *shape), peaks, experts_us);
    }
  }
  return out;
}

// One prefill and gen-len decode steps of `batch` sequences with each forward queued behind a
// hold (see CudaBackend::HoldForProfile).
absl::StatusOr<Json> ProfileBatch(xserv::kernels::cuda::CudaBackend& cuda, Runner& runner,
                                  const BenchConfig& cfg, const xserv::ModelConfig& c, int batch,
                                  int64_t blocks_per_seq) {
  std::mt19937_64 rng(cfg.seed + 7 * static_cast<uint64_t>(batch));
  std::vector<std::vector<int32_t>> prompts(batch), tables(batch), step_tokens(batch);
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i < cfg.prompt_len; ++i) {
      prompts[s].push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size)));
    }
    for (int64_t b = 0; b < blocks_per_seq; ++b) {
      tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    }
  }
  runner.set_before_forward([&] { return cuda.HoldForProfile(cfg.hold_us); });
  RETURN_IF_ERROR(cuda.TakeOpProfile().status());  // drop what the timed runs left
  runner.TakeEnqueueSeconds();
  std::printf("profile, batch %d:\n", batch);
  Json out;
  // The roofline's shapes: one prefill of prompt_len rows per sequence (logits of the last), then
  // decode steps over an average context of prompt_len + (gen_len - 1) / 2 cached tokens.
  // FP8 linears (an FP8 checkpoint's or quantised on load) stay FP8 with --fp8-matmuls.
  const bool fp8_linears =
      cfg.fp8_matmuls && (cfg.quantize_fp8 || c.quantization.method == xserv::QuantMethod::kFp8);
  const double bytes_per_weight = fp8_linears ? 1.0 : 2.0;
  // With --fp8-w8a8 the linears of more than the GEMV's rows multiply FP8 activations on FP8
  // tensor cores (fewer rows stream the weights through the decode GEMVs).
  const auto fp8_math = [&](int64_t rows) {
    return fp8_linears && cfg.kernels.fp8_w8a8 && rows > xserv::kernels::cuda::kGemvMaxRows;
  };
  // Quantised on load, the experts are kept FP8 with --fp8-matmuls and decoded to bf16 without;
  // otherwise an MXFP4 checkpoint's stay MXFP4 and dense ones bf16.
  // --fp8-lm-head: the lm_head is FP8 where kept so (--fp8-matmuls, and a shape the backend's
  // FP8 GEMM takes: TakeLmHead), at the FP8 rate as above (the logits rows).
  const bool fp8_lm_head = cfg.fp8_lm_head && cfg.fp8_matmuls &&
                           cuda.Fp8MatmulAtAnyRows(c.vocab_size, c.hidden_size, 128);
  const double lm_head_bytes = fp8_lm_head ? 1.0 : 2.0;
  const auto lm_head_fp8_math = [&](int64_t rows) { return fp8_lm_head && fp8_math(rows); };
  const double expert_bytes = cfg.quantize_fp8 ? bytes_per_weight
                              : c.quantization.method == xserv::QuantMethod::kMxfp4 ? 17.0 / 32.0
                                                                                    : 2.0;
  const xserv::tools::PhaseShape prefill_shape{.batch = batch,
                                               .new_tokens = cfg.prompt_len,
                                               .logits_rows = batch,
                                               .linear_bytes_per_weight = bytes_per_weight,
                                               .linear_fp8_math =
                                                   fp8_math(int64_t{batch} * cfg.prompt_len),
                                               .lm_head_bytes_per_weight = lm_head_bytes,
                                               .lm_head_fp8_math = lm_head_fp8_math(batch),
                                               .expert_bytes_per_weight = expert_bytes,
                                               .fp8_kv_cache = cfg.fp8_kv_cache};
  const xserv::tools::PhaseShape decode_shape{
      .batch = batch,
      .new_tokens = 1,
      .context = cfg.prompt_len + (cfg.gen_len - 1) / 2.0,
      .logits_rows = batch,
      .linear_bytes_per_weight = bytes_per_weight,
      .linear_fp8_math = fp8_math(batch),
      .lm_head_bytes_per_weight = lm_head_bytes,
      .lm_head_fp8_math = lm_head_fp8_math(batch),
      .expert_bytes_per_weight = expert_bytes,
      .fp8_kv_cache = cfg.fp8_kv_cache};
  ASSIGN_OR_RETURN(std::vector<int32_t> next, runner.Step(prompts, 0, tables));
  ASSIGN_OR_RETURN(out["prefill"],
                   PhaseProfile(cuda, runner, 1, cfg, c, &prefill_shape, "prefill"));
  for (int i = 0; i < cfg.gen_len; ++i) {
    for (int s = 0; s < batch; ++s) step_tokens[s] = {next[s]};
    ASSIGN_OR_RETURN(next, runner.Step(step_tokens, cfg.prompt_len + i, tables));
  }
  ASSIGN_OR_RETURN(out["decode"],
                   PhaseProfile(cuda, runner, cfg.gen_len, cfg, c, &decode_shape, "decode"));
  runner.set_before_forward(nullptr);
  return out;
}
#endif

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
    if (!r.profile.is_null()) metrics.back()["profile"] = r.profile;
  }
  return Json{
      {"date", xserv::UtcTimestamp()},
      {"commit", build.git_commit},
      {"dirty", build.git_dirty},
      {"build_type", build.build_type},
      {"hardware",
       {{"cpu", xserv::CpuModelName()},
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
        {"profile_ops", cfg.profile_ops},
        {"gemv", cfg.kernels.gemv},
        {"pdl", cfg.kernels.pdl},
        {"quantization", cfg.quantize_fp8 ? "fp8" : "none"},
        {"fp8_matmuls", cfg.fp8_matmuls},
        {"fp8_lm_head", cfg.fp8_lm_head},
        {"kv_cache_dtype", cfg.fp8_kv_cache ? "fp8" : "auto"},
        {"flash_prefill", cfg.kernels.flash_prefill},
        {"decode_attention", cfg.kernels.decode_attention},
        {"decode_attention_keys_as_m", cfg.kernels.decode_keys_as_m},
        {"decode_attention_four_ctas_per_sm", cfg.kernels.decode_four_ctas_per_sm},
        {"decode_attention_kv_heads_first", cfg.kernels.decode_kv_heads_first},
        {"decode_attention_wide_max_pairs", cfg.kernels.decode_wide_max_pairs},
        {"fuse_qk_norm_rope", cfg.kernels.fuse_qk_norm_rope},
        {"fuse_silu_gemv", cfg.kernels.fuse_silu_gemv},
        {"fuse_norm_gemv", cfg.kernels.fuse_norm_gemv},
        {"fuse_norm_quant", cfg.kernels.fuse_norm_quant},
        {"fuse_silu_quant", cfg.kernels.fuse_silu_quant},
        {"fused_mlp_row", cfg.kernels.fused_mlp_row},
        {"fuse_moe_norm", cfg.kernels.fuse_moe_norm},
        {"gemm_autotune", cfg.kernels.gemm_autotune},
        {"fp8_w8a8", cfg.kernels.fp8_w8a8},
        {"fp8_w8a8_row_scales_rows", cfg.kernels.fp8_w8a8_row_scales_rows},
        {"fp8_gemv_mma", cfg.kernels.fp8_gemv_mma},
        {"l2_prefetch_mb", cfg.kernels.l2_prefetch_mb},
        {"l2_prefetch_own", cfg.kernels.l2_prefetch_own},
        {"fp8_gemv_mma_min_rows", cfg.kernels.fp8_gemv_mma_min_rows},
        {"peak_read_gb_s", cfg.peak_read_gb_s},
        {"peak_bf16_tflop_s", cfg.peak_bf16_tflop_s},
        {"peak_fp8_tflop_s", cfg.peak_fp8_tflop_s},
        {"cuda_graphs", cfg.cuda_graphs && !cfg.profile_ops},
        {"batches", cfg.batches}}},
      {"metrics", std::move(metrics)}};
}

absl::Status Run(const BenchConfig& cfg) {
  const int max_batch = *std::max_element(cfg.batches.begin(), cfg.batches.end());
  const int max_tokens = max_batch * cfg.prompt_len;
  std::unique_ptr<xserv::kernels::Backend> owned;
#if XSERV_HAVE_CUDA
  xserv::kernels::cuda::CudaBackend* cuda_backend = nullptr;
#endif
  if (cfg.backend == "cpu") {
    owned = std::make_unique<xserv::kernels::cpu::CpuBackend>(
        xserv::kernels::cpu::CpuBackendOptions{.num_threads = cfg.threads});
#if XSERV_HAVE_CUDA
  } else if (cfg.backend == "cuda") {
    xserv::kernels::cuda::CudaBackendOptions options =
        xserv::worker::CudaOptionsOf(cfg.kernels, cfg.batch_invariant, cfg.fp8_matmuls);
    options.invariant_reference_rows = cfg.invariant_reference_rows;
    options.profile_ops = cfg.profile_ops;
    ASSIGN_OR_RETURN(auto cuda, xserv::kernels::cuda::CudaBackend::Create(options));
    cuda_backend = cuda.get();
    owned = std::move(cuda);
#endif
  } else {
    return absl::InvalidArgumentError("backend " + cfg.backend + " is not available in this build");
  }
  if (cfg.profile_ops && cfg.backend != "cuda") {
    return absl::InvalidArgumentError("--profile-ops needs --backend cuda");
  }
  xserv::kernels::Backend& backend = *owned;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m,
                   model::LoadModel(cfg.model_dir, backend,
                                    model::ModelLoadOptions{
                                        .max_num_tokens = max_tokens,
                                        .quantize_fp8_block = cfg.quantize_fp8 ? 128 : 0,
                                        .fp8_matmuls = cfg.fp8_matmuls,
                                        .fp8_lm_head = cfg.fp8_lm_head}));
  const xserv::ModelConfig& c = m->config();
  if (cfg.prompt_len + cfg.gen_len > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("prompt-len + gen-len exceeds the model's ",
                                                   c.max_position_embeddings, " positions"));
  }
  const int64_t blocks_per_seq =
      (cfg.prompt_len + cfg.gen_len + cfg.block_size - 1) / cfg.block_size;
  ASSIGN_OR_RETURN(model::KvCache kv,
                   model::KvCache::Allocate(backend, c, max_batch * blocks_per_seq, cfg.block_size,
                                            /*num_host_blocks=*/0, {.fp8 = cfg.fp8_kv_cache}));
  ASSIGN_OR_RETURN(model::BatchBuilder builder,
                   model::BatchBuilder::Create(backend, {.max_tokens = max_tokens,
                                                         .max_seqs = max_batch,
                                                         .max_blocks_per_seq = blocks_per_seq,
                                                         .block_size = cfg.block_size}));
  ASSIGN_OR_RETURN(xserv::kernels::Buffer logits,
                   backend.Allocate(xserv::kernels::DType::kF32, {max_batch, c.vocab_size}));
  Runner runner(backend, *m, kv, builder, logits.view());
  // Graphs replay whole steps, which the per-op profile cannot see into: off while profiling.
  std::unique_ptr<model::DecodeGraphs> graphs;
  if (cfg.backend == "cuda" && cfg.cuda_graphs && !cfg.profile_ops) {
    graphs = std::make_unique<model::DecodeGraphs>(backend, *m, kv, builder, max_batch,
                                                   cfg.prompt_len + cfg.gen_len);
    runner.set_graphs(graphs.get());
  }

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
#if XSERV_HAVE_CUDA
    if (cfg.profile_ops) {
      ASSIGN_OR_RETURN(r.profile, ProfileBatch(*cuda_backend, runner, cfg, c, batch, blocks_per_seq));
    }
#endif
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
  std::string quantization = "none", kv_cache_dtype = "auto";
  app.add_option("--quantization", quantization, "none or fp8 (quantise on load, 128x128)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--fp8-matmuls", cfg.fp8_matmuls, "keep FP8 weights FP8 (W8A16 MatmulFp8)")
      ->capture_default_str();
  app.add_option("--fp8-lm-head", cfg.fp8_lm_head, "the lm_head through FP8 too (128x128)")
      ->capture_default_str();
  xserv::worker::AddKernelChoiceFlags(app, cfg.kernels);
  app.add_option("--kv-cache-dtype", kv_cache_dtype, "auto (the compute dtype) or fp8")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  app.add_option("--cuda-graphs", cfg.cuda_graphs,
                 "cuda: decode steps as CUDA graph replays (off with --profile-ops)")
      ->capture_default_str();
  app.add_flag("--profile-ops", cfg.profile_ops,
               "cuda: one more run per batch size timing every op on the GPU (see the header)");
  app.add_option("--peak-fp8-tflops", cfg.peak_fp8_tflop_s,
                 "--profile-ops roofline: the device's FP8 tensor-core rate (W8A8), TFLOP/s")
      ->capture_default_str();
  app.add_option("--peak-read-gbs", cfg.peak_read_gb_s,
                 "--profile-ops roofline: the device's read bandwidth, GB/s")
      ->capture_default_str();
  app.add_option("--peak-tflops", cfg.peak_bf16_tflop_s,
                 "--profile-ops roofline: the device's bf16 tensor-core rate, TFLOP/s")
      ->capture_default_str();
  app.add_option("--profile-hold-us", cfg.hold_us,
                 "--profile-ops: device hold before each step; must exceed its queueing time")
      ->capture_default_str();
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-engine-bench")) {
    return *exit_code;
  }
  cfg.quantize_fp8 = quantization == "fp8";
  cfg.fp8_kv_cache = kv_cache_dtype == "fp8";
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
