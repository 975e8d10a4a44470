// xserv-moe-bench: the quantised mixture-of-experts kernels (moe_quantized.h) alone, MXFP4 or FP8
// experts, on gpt-oss-20b's shapes by default: one layer's experts for T tokens routed top-k over
// E experts, as CudaBackend::ExpertsQuantized runs them (LaunchMoeLayer), and each projection
// alone. Calls alternate over enough copies of the layer's experts that every call reads its
// experts from HBM (one gpt-oss-20b layer holds 415 MB of MXFP4 experts, 800 MB of FP8; the
// H200's L2 50 MB), captured into a CUDA graph as the decode graphs do. Reports µs per call, the
// bytes of the experts the tokens use (codes and scales) per µs, and TFLOP/s of the MMA work the
// pairs need.
//
// Usage: xserv-moe-bench [--tokens 1,2,4,8,64,256,2048] [--experts 32] [--top-k 4]
//                        [--hidden 2880] [--inter 2880] [--kernel auto|gemv|gemm]
//                        [--format mxfp4|fp8] [--json FILE]
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
#include "kernels/cuda/moe_quantized.h"
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

// One copy of a layer's experts as MoeLayerArgs' weight fields take them (MoeWeightFormat).
struct ExpertsCopy {
  void* gate_up_blocks;
  void* gate_up_scales;
  void* gate_up_bias;  // bf16 [E, 2I]
  void* down_blocks;
  void* down_scales;
  void* down_bias;  // bf16 [E, H]
};

struct Config {
  int experts = 32, top_k = 4, hidden = 2880, inter = 2880;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Quantised mixture-of-experts kernels on gpt-oss-20b's shapes"};
  Config c;
  std::string tokens_spec = "1,2,4,8,16,64,256,2048";
  std::string kernel = "auto", format_name = "mxfp4";
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
  app.add_option("--format", format_name, "the experts' weights: MXFP4 or FP8 (128 x 128 blocks)")
      ->check(CLI::IsMember({"mxfp4", "fp8"}))
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
  const bool fp8 = format_name == "fp8";
  // Bytes of one expert's scales, and of its codes and scales, of a [rows, in] matrix.
  const auto scale_bytes = [&](int64_t rows, int64_t in) {
    constexpr int64_t b = cuda::kMoeFp8Block;
    return fp8 ? (rows + b - 1) / b * ((in + b - 1) / b) * 4 : rows * (in / 32);
  };
  const auto matrix_bytes = [&](int64_t rows, int64_t in) {
    return rows * in / (fp8 ? 1 : 2) + scale_bytes(rows, in);
  };
  const int64_t gate_up_bytes = matrix_bytes(2 * i, h), down_bytes = matrix_bytes(h, i);
  std::vector<ExpertsCopy> layer_copies;
  for (int n = 0; n < copies; ++n) {
    // MXFP4: codes 0x3c are 1.5 and 1.0 (low nibble first), scales 0x7a 2^-5. FP8: codes 0x3c are
    // 1.5, scales 0x3c3c3c3c 0.0115. Bias bf16 0x3c3c = 0.0115.
    const int code_div = fp8 ? 1 : 2, scale_byte = fp8 ? 0x3c : 0x7a;
    layer_copies.push_back({.gate_up_blocks = DeviceBytes(e * 2 * i * h / code_div, 0x3c),
                            .gate_up_scales = DeviceBytes(e * scale_bytes(2 * i, h), scale_byte),
                            .gate_up_bias = DeviceBytes(e * 2 * i * 2, 0x3c),
                            .down_blocks = DeviceBytes(e * h * i / code_div, 0x3c),
                            .down_scales = DeviceBytes(e * scale_bytes(h, i), scale_byte),
                            .down_bias = DeviceBytes(e * h * 2, 0x3c)});
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; %s, %d experts top-%d, hidden %d, inter %d; %d copies of "
              "%.0f MB\n",
              prop.name, prop.multiProcessorCount, format_name.c_str(), c.experts, c.top_k,
              c.hidden, c.inter, copies,
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
                             .format = fp8 ? cuda::MoeWeightFormat::kFp8
                                           : cuda::MoeWeightFormat::kMxfp4,
                             .act = DeviceBytes(pairs * i * 2, 0),
                             .y = static_cast<float*>(DeviceBytes(pairs * h * 4, 0)),
                             .out = {DeviceBytes(t * h * 2, 0), t, h, h}};
    layer.routing =
        static_cast<int32_t*>(DeviceBytes(cuda::MoeRoutingIntsFor(pairs, c.experts) * 4, 0));
    CHECK_CUDA(
        cudaMemcpy(const_cast<int32_t*>(layer.ids), ids.data(), pairs * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(const_cast<float*>(layer.weights), weights.data(), pairs * 4,
                          cudaMemcpyHostToDevice));
    const auto with_experts = [&](int n) {
      const ExpertsCopy& w = layer_copies[static_cast<size_t>(n) % layer_copies.size()];
      cuda::MoeLayerArgs l = layer;
      l.gate_up_blocks = static_cast<const uint8_t*>(w.gate_up_blocks);
      l.gate_up_scales = w.gate_up_scales;
      l.gate_up_bias = w.gate_up_bias;
      l.down_blocks = static_cast<const uint8_t*>(w.down_blocks);
      l.down_scales = w.down_scales;
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
          CHECK_CUDA(cuda::LaunchMoeLayer(l, gemv, s));
          return;
        }
        const cuda::MoeGemmArgs projection = name == "gate_up" ? l.GateUp() : l.Down();
        if (name == "gate_up" && !gemv) {
          CHECK_CUDA(cuda::LaunchMoeAlign(l.ids, static_cast<int>(pairs), l.experts,
                                          projection.routing, s));
        }
        CHECK_CUDA(cuda::LaunchMoeProjection(projection, gemv, s));
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
                          {"format", format_name},
                          {"copies", copies}}},
                        {"rows", rows}}
             .dump(1)
      << "\n";
  }
  return 0;
}
