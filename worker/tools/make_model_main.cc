// xserv-make-model: writes a HF-format model directory with deterministic random weights.
//
//   xserv-make-model --arch qwen3 --preset tiny --seed 1
//       --tokenizer .assets/tokenizers/qwen3 --out /tmp/qwen3-tiny [--dtype bf16|f32]
//       [--num-layers N]
#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "spdlog/spdlog.h"
#include "worker/tools/model_maker.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a HuggingFace-format model directory with deterministic random weights"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  std::string arch = "qwen3", preset = "tiny", dtype = "bf16";
  xserv::tools::MakeModelOptions options;
  app.add_option("--arch", arch, "gpt2, qwen3, llama or gpt-oss")->required();
  app.add_option("--preset", preset, "tiny (tests) or small (benchmarks, demo)")->required();
  app.add_option("--seed", options.seed, "random seed; the same seed gives identical files")
      ->required();
  app.add_option("--tokenizer", options.tokenizer_dir,
                 "directory with tokenizer.json and tokenizer_config.json")
      ->required();
  app.add_option("--out", options.out_dir, "output directory (created if absent)")->required();
  app.add_option("--dtype", dtype, "dtype of dense tensors: bf16 or f32 (gpt-oss experts stay "
                                   "MXFP4)")
      ->capture_default_str();
  app.add_option("--fp8-block", options.fp8_block,
                 "qwen3/llama: attention and MLP weights as FP8 E4M3 with NxN block scales "
                 "(the Qwen3-8B-FP8 checkpoint layout; its N is 128)")
      ->check(CLI::PositiveNumber);
  app.add_option("--num-layers", options.num_layers,
                 "number of decoder layers, overriding the preset's (e.g. deeper tiny models)")
      ->check(CLI::PositiveNumber);
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-make-model")) {
    return *exit_code;
  }

  auto parsed_arch = xserv::tools::ParseModelArch(arch);
  auto parsed_preset = xserv::tools::ParseModelPreset(preset);
  for (const absl::Status& status : {parsed_arch.status(), parsed_preset.status()}) {
    if (!status.ok()) {
      spdlog::error("{}", status.ToString());
      return 2;
    }
  }
  if (dtype != "bf16" && dtype != "f32") {
    spdlog::error("unknown --dtype \"{}\" (bf16, f32)", dtype);
    return 2;
  }
  options.arch = *parsed_arch;
  options.preset = *parsed_preset;
  options.dtype = dtype == "f32" ? xserv::safetensors::DType::kF32
                                 : xserv::safetensors::DType::kBF16;
  if (absl::Status status = xserv::tools::MakeModel(options); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  spdlog::info("wrote {} {} (seed {}) to {}", arch, preset, options.seed, options.out_dir);
  return 0;
}
