// xserv-score: log-probabilities of token sequences under a model, like a perplexity tool.
//
//   xserv-score --model DIR [--backend cpu] [--top-k K] [--threads N] < requests.jsonl
//   {"ids": [1, 2, 3]}  ->  {"logprobs": [null, lp1, lp2], "top": [[[id, lp], ...], x3]}
// One reply line per request line; a malformed line gets {"error": "..."} and the tool goes on.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "kernels/cpu/cpu_backend.h"
#include "spdlog/spdlog.h"
#include "worker/tools/scorer.h"

int main(int argc, char** argv) {
  CLI::App app{"Score JSON lines of token ids from stdin: per-token logprobs and top-k"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  std::string model_dir, backend_name = "cpu";
  int top_k = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  xserv::tools::ScorerOptions options;
  app.add_option("--model", model_dir, "HF-format model directory")->required();
  app.add_option("--backend", backend_name, "cpu (cuda: not built yet)")->capture_default_str();
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
  if (backend_name == "cuda") {
    spdlog::error("--backend cuda: the CUDA backend is not built yet; use --backend cpu");
    return 2;
  }
  if (backend_name != "cpu") {
    spdlog::error("unknown --backend \"{}\" (cpu, cuda)", backend_name);
    return 2;
  }

  xserv::kernels::cpu::CpuBackend backend(
      xserv::kernels::cpu::CpuBackendOptions{.num_threads = threads});
  auto scorer = xserv::tools::Scorer::Create(model_dir, backend, options);
  if (!scorer.ok()) {
    spdlog::error("{}", scorer.status().ToString());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line == "\r") continue;
    std::string reply = xserv::tools::ScoreJsonLine(**scorer, line, top_k);
    reply.push_back('\n');
    std::fwrite(reply.data(), 1, reply.size(), stdout);
    std::fflush(stdout);
  }
  return 0;
}
