// xserv-score: log-probabilities of token sequences under a model, like a perplexity tool.
//
//   xserv-score --model DIR [--backend cpu|cuda] [--top-k K] [--threads N] < requests.jsonl
//   {"ids": [1, 2, 3]}  ->  {"logprobs": [null, lp1, lp2], "top": [[[id, lp], ...], x3]}
// One reply line per request line; a malformed line gets {"error": "..."} and the tool goes on.
// --dump-activations F writes the first request's per-layer activations (Model::Observe names)
// to the safetensors file F, for layer-by-layer comparison with a reference.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "kernels/cpu/cpu_backend.h"
#if XSERV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "spdlog/spdlog.h"
#include "worker/tools/activation_recorder.h"
#include "worker/tools/scorer.h"

int main(int argc, char** argv) {
  CLI::App app{"Score JSON lines of token ids from stdin: per-token logprobs and top-k"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  std::string model_dir, backend_name = "cpu", dump_path;
  int top_k = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  xserv::tools::ScorerOptions options;
  app.add_option("--model", model_dir, "HF-format model directory")->required();
  app.add_option("--backend", backend_name, "cpu or cuda")->capture_default_str();
  app.add_option("--dump-activations", dump_path,
                 "write the first request's per-layer activations to this safetensors file");
  app.add_option("--top-k", top_k, "alternatives listed after every position")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads")->capture_default_str()->check(
      CLI::PositiveNumber);
  app.add_option("--chunk-tokens", options.chunk_tokens,
                 "tokens per forward pass; longer inputs run in several chunks over the KV cache")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-score")) {
    return *exit_code;
  }
  std::unique_ptr<xserv::kernels::Backend> backend;
  if (backend_name == "cpu") {
    backend = std::make_unique<xserv::kernels::cpu::CpuBackend>(
        xserv::kernels::cpu::CpuBackendOptions{.num_threads = threads});
#if XSERV_HAVE_CUDA
  } else if (backend_name == "cuda") {
    auto cuda = xserv::kernels::cuda::CudaBackend::Create({.device = 0});
    if (!cuda.ok()) {
      spdlog::error("{}", cuda.status().ToString());
      return 1;
    }
    backend = std::move(*cuda);
#endif
  } else {
    spdlog::error("--backend \"{}\" is not available in this build (cpu{})", backend_name,
                  XSERV_HAVE_CUDA ? ", cuda" : "");
    return 2;
  }
  auto scorer = xserv::tools::Scorer::Create(model_dir, *backend, options);
  if (!scorer.ok()) {
    spdlog::error("{}", scorer.status().ToString());
    return 1;
  }
  std::unique_ptr<xserv::tools::ActivationRecorder> recorder;
  if (!dump_path.empty()) {
    recorder = std::make_unique<xserv::tools::ActivationRecorder>(*backend);
    (*scorer)->set_activation_observer(recorder->Observer());
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line == "\r") continue;
    std::string reply = xserv::tools::ScoreJsonLine(**scorer, line, top_k);
    reply.push_back('\n');
    std::fwrite(reply.data(), 1, reply.size(), stdout);
    std::fflush(stdout);
    if (recorder != nullptr) {  // the first request only
      (*scorer)->set_activation_observer({});
      absl::Status written = recorder->status();
      if (written.ok()) written = recorder->Write(dump_path);
      if (!written.ok()) {
        spdlog::error("--dump-activations: {}", written.ToString());
        return 1;
      }
      spdlog::info("wrote {} activations to {}", recorder->size(), dump_path);
      recorder.reset();
    }
  }
  return 0;
}
