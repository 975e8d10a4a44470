// xserv-allreduce-bench: bf16 all-reduce latency on the visible GPUs of one host (one thread per
// GPU, as the tests run ranks), NCCL against the peer all-reduce (peer_all_reduce.h) one-shot
// and two-shot, per message size. Each timing is a CUDA graph of --calls all-reduces (as the TP
// decode graphs capture them), best of --repeats replays, measured on rank 0.
//
// Usage: xserv-allreduce-bench [--sizes 8192,65536,...] [--ranks 2] [--json FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "worker/parallel/kv_store.h"
#include "worker/parallel/nccl_communicator.h"

namespace {

using xserv::parallel::Communicator;
using xserv::parallel::ElementType;
using xserv::parallel::ReduceOp;

struct Form {
  std::string name;
  int64_t peer_max = 0, one_shot_max = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bf16 all-reduce: NCCL vs peer one-shot / two-shot, by message size"};
  std::string sizes_spec = "2048,8192,16384,32768,65536,131072,262144,524288,1048576,2097152,4194304";
  int ranks = 0, calls = 100, repeats = 5;
  std::string json_path;
  app.add_option("--sizes", sizes_spec, "message sizes in bytes")->capture_default_str();
  app.add_option("--ranks", ranks, "GPUs (default: all visible)");
  app.add_option("--calls", calls, "all-reduces per timed graph")->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays (best kept)")->capture_default_str();
  app.add_option("--json", json_path, "also write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> sizes;
  for (const absl::string_view s : absl::StrSplit(sizes_spec, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v <= 0 || v % 16 != 0) {
      std::fprintf(stderr, "sizes must be positive multiples of 16 bytes\n");
      return 2;
    }
    sizes.push_back(v);
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (ranks == 0) ranks = devices;
  if (ranks < 2 || ranks > devices) {
    std::fprintf(stderr, "needs at least two GPUs (%d visible)\n", devices);
    return 1;
  }
  const int64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  const std::vector<Form> forms = {{"nccl", 0, 0},
                                   {"one-shot", max_size, max_size},
                                   {"two-shot", max_size, 0}};
  // [form][size] µs per call on rank 0.
  std::vector<std::vector<double>> us(forms.size(), std::vector<double>(sizes.size(), 0));
  auto store = std::make_shared<xserv::parallel::InMemoryKeyValueStore>();
  std::barrier sync(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      void* data = nullptr;
      cudaMalloc(&data, max_size);
      cudaMemset(data, 0, max_size);
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      for (size_t f = 0; f < forms.size(); ++f) {
        auto comm = xserv::parallel::CreateNcclCommunicator(
            {.rank = r, .world_size = ranks, .store = store, .prefix = forms[f].name,
             .stream = stream, .peer_max_bytes = forms[f].peer_max,
             .peer_one_shot_max_bytes = forms[f].one_shot_max});
        if (!comm.ok()) {
          errors[r] = comm.status().ToString();
          std::fprintf(stderr, "rank %d: %s\n", r, errors[r].c_str());
          std::exit(1);
        }
        for (size_t s = 0; s < sizes.size(); ++s) {
          const size_t count = static_cast<size_t>(sizes[s] / 2);
          for (int i = 0; i < 10; ++i) {  // warm up (NCCL's first calls set up channels)
            (void)(*comm)->AllReduceTyped(data, count, ElementType::kBF16, ReduceOp::kSum);
          }
          cudaStreamSynchronize(stream);
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
          for (int i = 0; i < calls; ++i) {
            (void)(*comm)->AllReduceTyped(data, count, ElementType::kBF16, ReduceOp::kSum);
          }
          cudaStreamEndCapture(stream, &graph);
          cudaGraphInstantiate(&exec, graph, 0);
          float best = 1e30f;
          for (int rep = 0; rep <= repeats; ++rep) {
            sync.arrive_and_wait();  // the ranks start each replay together
            cudaEventRecord(start, stream);
            cudaGraphLaunch(exec, stream);
            cudaEventRecord(stop, stream);
            cudaEventSynchronize(stop);
            float ms = 0;
            cudaEventElapsedTime(&ms, start, stop);
            if (rep > 0) best = std::min(best, ms);
          }
          if (r == 0) us[f][s] = best * 1000.0 / calls;
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
        }
        sync.arrive_and_wait();
      }
      cudaFree(data);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%d x %s; bf16 sum, µs per all-reduce (CUDA graph of %d)\n", ranks, prop.name, calls);
  std::printf("%10s", "bytes");
  for (const Form& f : forms) std::printf(" %10s", f.name.c_str());
  std::printf("\n");
  nlohmann::json rows = nlohmann::json::array();
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::printf("%10lld", static_cast<long long>(sizes[s]));
    nlohmann::json row{{"bytes", sizes[s]}};
    for (size_t f = 0; f < forms.size(); ++f) {
      std::printf(" %10.2f", us[f][s]);
      row[forms[f].name + "_us"] = us[f][s];
    }
    std::printf("\n");
    rows.push_back(row);
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"device", prop.name}, {"ranks", ranks},
                                               {"rows", rows}}.dump(1)
                             << "\n";
  }
  return 0;
}
