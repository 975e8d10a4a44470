// xserv-moe-bench: the MXFP4 mixture-of-experts kernels (moe_mxfp4.h) alone, on gpt-oss-20b's
// shapes by default: one layer's experts for T tokens routed top-k over E experts, as
// CudaBackend::ExpertsMxfp4 runs them (LaunchMoeMxfp4Layer), and each projection alone. Calls
// alternate over enough copies of the layer's experts that every call reads its experts from HBM
// (one gpt-oss-20b layer holds 415 MB of MXFP4 experts; the H200's L2 50 MB), captured into a CUDA
// graph as the decode graphs do. Reports µs per call, the bytes of the experts the tokens use
// (blocks and scales) per µs, and TFLOP/s of the MMA work the pairs need.
//
// Usage: xserv-moe-bench [--tokens 1,2,4,8,64,256,2048] [--experts 32] [--top-k 4]
//                        [--hidden 2880] [--inter 2880] [--kernel auto|gemv|gemm] [--json FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda/moe_mxfp4.h"
#include "kernels/cuda/tools/bench_util.h"
#include "nlohmann/json.hpp"

namespace {

namespace cuda = xserv::kernels::cuda;

void* DeviceBytes(int64_t bytes, int value) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, static_cast<size_t>(bytes)));
  CHECK_CUDA(cudaMemset(p, value, static_cast<size_t>(bytes)));
  return p;
}

// One copy of a layer's experts in the HF MXFP4 layout (MoeLayerArgs' weight fields).
struct ExpertsCopy {
  void* gate_up_blocks;  // [E, 2I, H/32, 16]
  void* gate_up_scales;  // [E, 2I, H/32]
  void* gate_up_bias;    // bf16 [E, 2I]
  void* down_blocks;     // [E, H, I/32, 16]
  void* down_scales;     // [E, H, I/32]
  void* down_bias;       // bf16 [E, H]
};

struct Config {
  int experts = 32, top_k = 4, hidden = 2880, inter = 2880;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MXFP4 mixture-of-experts kernels on gpt-oss-20b's shapes"};
  Config c;
  std::string tokens_spec = "1,2,4,8,16,64,256,2048";
  std::string kernel = "auto";
  std::string json_path;
  int calls = 40, repeats = 5, copies = 2;
  app.add_option("--tokens", tokens_spec, "token counts to time")->capture_default_str();
  app.add_option("--experts", c.experts)->capture_default_str();
  app.add_option("--top-k", c.top_k)->capture_default_str();
  app.add_option("--hidden", c.hidden, "a multiple of 32")->capture_default_str();
  app.add_option("--inter", c.inter, "a multiple of 32")->capture_default_str();
  app.add_option("--kernel", kernel, "auto (as CudaBackend picks), gemv or gemm")
      ->check(CLI::IsMember({"auto", "gemv", "gemm"}))
      ->capture_default_str();
  app.add_option("--calls", calls, "calls per timed graph")->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays (best kept)")->capture_default_str();
  app.add_option("--copies", copies, "copies of the layer's experts, used in turn")
      ->capture_default_str();
  app.add_option("--json", json_path, "also write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);
  if (c.hidden % 32 != 0 || c.inter % 32 != 0 || c.top_k < 1 || c.top_k > c.experts || copies < 1) {
    std::fprintf(stderr, "bad sizes\n");
    return 2;
  }
  std::vector<int> token_counts;
  for (const absl::string_view t : absl::StrSplit(tokens_spec, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1 || n > 65535 / c.top_k) {
      std::fprintf(stderr, "bad --tokens\n");
      return 2;
    }
    token_counts.push_back(n);
  }

  const int64_t e = c.experts, h = c.hidden, i = c.inter;
  // Bytes of one expert's MXFP4 blocks and scales, per projection.
  const int64_t gate_up_bytes = 2 * i * (h / 32) * 17, down_bytes = h * (i / 32) * 17;
  std::vector<ExpertsCopy> layer_copies;
  for (int n = 0; n < copies; ++n) {
    // Codes 0x3c: 1.5 and 1.0 (low nibble first); scales 0x7a: 2^-5; bias bf16 0x3c3c = 0.0115.
    layer_copies.push_back({.gate_up_blocks = DeviceBytes(e * 2 * i * h / 2, 0x3c),
                            .gate_up_scales = DeviceBytes(e * 2 * i * h / 32, 0x7a),
                            .gate_up_bias = DeviceBytes(e * 2 * i * 2, 0x3c),
                            .down_blocks = DeviceBytes(e * h * i / 2, 0x3c),
                            .down_scales = DeviceBytes(e * h * i / 32, 0x7a),
                            .down_bias = DeviceBytes(e * h * 2, 0x3c)});
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; %d experts top-%d, hidden %d, inter %d; %d copies of %.0f MB\n",
              prop.name, prop.multiProcessorCount, c.experts, c.top_k, c.hidden, c.inter, copies,
              static_cast<double>(e * (gate_up_bytes + down_bytes)) / 1e6);
  std::printf("%6s %-5s %-8s %8s %10s %9s %9s\n", "tokens", "kern", "part", "experts", "us/call",
              "GB/s", "TFLOP/s");
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 rng(0);
  for (const int t : token_counts) {
    const bool gemv = kernel == "gemv" || (kernel == "auto" && t <= cuda::kMoeGemvMaxTokens);
    const int64_t pairs = int64_t{t} * c.top_k;
    // Distinct random experts per token, equal weights.
    std::vector<int32_t> ids(pairs);
    std::set<int32_t> used;
    for (int tok = 0; tok < t; ++tok) {
      std::vector<int32_t> perm(e);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int j = 0; j < c.top_k; ++j) used.insert(ids[tok * c.top_k + j] = perm[j]);
    }
    const std::vector<float> weights(pairs, 1.0f / c.top_k);
    cuda::MoeLayerArgs layer{.x = {DeviceBytes(t * h * 2, 0x3c), t, h, h},
                             .ids = static_cast<int32_t*>(DeviceBytes(pairs * 4, 0)),
                             .weights = static_cast<float*>(DeviceBytes(pairs * 4, 0)),
                             .top_k = c.top_k,
                             .experts = c.experts,
                             .hidden = c.hidden,
                             .inter = c.inter,
                             .act = DeviceBytes(pairs * i * 2, 0),
                             .y = static_cast<float*>(DeviceBytes(pairs * h * 4, 0)),
                             .out = {DeviceBytes(t * h * 2, 0), t, h, h}};
    layer.routing =
        static_cast<int32_t*>(DeviceBytes(cuda::MoeRoutingInts(layer.MaxBlocks()) * 4, 0));
    CHECK_CUDA(
        cudaMemcpy(const_cast<int32_t*>(layer.ids), ids.data(), pairs * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(const_cast<float*>(layer.weights), weights.data(), pairs * 4,
                          cudaMemcpyHostToDevice));
    const auto with_experts = [&](int n) {
      const ExpertsCopy& w = layer_copies[static_cast<size_t>(n) % layer_copies.size()];
      cuda::MoeLayerArgs l = layer;
      l.gate_up_blocks = static_cast<const uint8_t*>(w.gate_up_blocks);
      l.gate_up_scales = static_cast<const uint8_t*>(w.gate_up_scales);
      l.gate_up_bias = w.gate_up_bias;
      l.down_blocks = static_cast<const uint8_t*>(w.down_blocks);
      l.down_scales = static_cast<const uint8_t*>(w.down_scales);
      l.down_bias = w.down_bias;
      return l;
    };

    const auto used_experts = static_cast<int64_t>(used.size());
    struct Part {
      const char* name;
      int64_t bytes;
      double flop;
    };
    const double gate_up_flop = 2.0 * pairs * 2 * i * h, down_flop = 2.0 * pairs * h * i;
    for (const Part part :
         {Part{"layer", used_experts * (gate_up_bytes + down_bytes), gate_up_flop + down_flop},
          Part{"gate_up", used_experts * gate_up_bytes, gate_up_flop},
          Part{"down", used_experts * down_bytes, down_flop}}) {
      const std::string name = part.name;
      // The layer as CudaBackend runs it; a projection alone (gate_up with its alignment).
      const auto call = [&](int n, cudaStream_t s) {
        const cuda::MoeLayerArgs l = with_experts(n);
        if (name == "layer") {
          CHECK_CUDA(cuda::LaunchMoeMxfp4Layer(l, gemv, s));
          return;
        }
        const cuda::MoeGemmArgs projection = name == "gate_up" ? l.GateUp() : l.Down();
        if (name == "gate_up" && !gemv) {
          CHECK_CUDA(cuda::LaunchMoeAlign(l.ids, static_cast<int>(pairs), l.experts,
                                          projection.routing, s));
        }
        CHECK_CUDA(cuda::LaunchMoeMxfp4Projection(projection, gemv, s));
      };
      for (int n = 0; n < copies; ++n) call(n, stream);  // kernel attributes, outside capture
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double us = cuda::bench::TimeGraphOfCalls(call, calls, repeats, stream);
      const double gb_s = static_cast<double>(part.bytes) / (us * 1e3);
      const double tflop_s = part.flop / (us * 1e6);
      std::printf("%6d %-5s %-8s %8lld %10.2f %9.0f %9.1f\n", t, gemv ? "gemv" : "gemm", part.name,
                  static_cast<long long>(used_experts), us, gb_s, tflop_s);
      std::fflush(stdout);
      rows.push_back({{"tokens", t},
                      {"kernel", gemv ? "gemv" : "gemm"},
                      {"part", part.name},
                      {"experts_used", used_experts},
                      {"us_per_call", us},
                      {"expert_gb_s", gb_s},
                      {"tflop_s", tflop_s}});
    }
    for (const void* p :
         std::initializer_list<const void*>{layer.x.data, layer.ids, layer.weights, layer.routing,
                                            layer.act, layer.y, layer.out.data}) {
      CHECK_CUDA(cudaFree(const_cast<void*>(p)));
    }
  }
  for (const ExpertsCopy& w : layer_copies) {
    for (void* p : {w.gate_up_blocks, w.gate_up_scales, w.gate_up_bias, w.down_blocks,
                    w.down_scales, w.down_bias}) {
      CHECK_CUDA(cudaFree(p));
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"device", prop.name},
                        {"config",
                         {{"experts", c.experts},
                          {"top_k", c.top_k},
                          {"hidden", c.hidden},
                          {"inter", c.inter},
                          {"kernel", kernel},
                          {"copies", copies}}},
                        {"rows", rows}}
             .dump(1)
      << "\n";
  }
  return 0;
}
