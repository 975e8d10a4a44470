// xserv-mlp-bench: a gated MLP at one row with FP8 weights (Qwen3-8B's shape by default), as the
// decode step runs it today (the norm-fused gate_up GEMV, SiluMul, the down GEMV: three kernels
// under PDL) against the one-kernel form (gated_mlp_gemv.h; "-na": timing only, the partial
// outputs never added). Weights rotate over enough copies that every call reads them
// from HBM; calls are captured into a CUDA graph and replayed, as the decode graphs do. Before
// timing, every form's output on random weights is checked against the chain's (within one bf16
// rounding) and the one-kernel form's scratch for being left zero; a failed check exits 1.
//
// Usage: xserv-mlp-bench [--hidden 4096] [--inter 12288] [--json FILE]
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gated_mlp_gemv.h"
#include "kernels/cuda/gemv.h"
#include "kernels/fp8.h"
#include "kernels/cuda/tools/bench_util.h"
#include "nlohmann/json.hpp"

namespace {

namespace kc = xserv::kernels::cuda;

struct Variant {
  std::string name;
  bool fused = false;
  bool no_adds = false;  // timing only: no check
};

struct Copy {
  uint8_t* gate_up = nullptr;
  float* gate_up_scales = nullptr;
  uint8_t* down = nullptr;
  float* down_scales = nullptr;
  uint8_t* down_t = nullptr;
  float* down_t_scales = nullptr;
};

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, count * sizeof(T)));
  return static_cast<T*>(p);
}

template <typename T>
void Upload(T* dst, const std::vector<T>& src) {
  CHECK_CUDA(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

struct Bench {
  int hidden = 0, inter = 0;
  std::vector<Copy> copies;
  void* x = nullptr;             // bf16 [hidden]: the previous block's output
  void* residual = nullptr;      // bf16 [hidden]
  void* residual_out = nullptr;  // bf16 [hidden]
  void* normed = nullptr;        // bf16 [hidden]
  void* norm_weight = nullptr;   // bf16 [hidden]
  void* gate_up_out = nullptr;   // bf16 [2 inter]
  void* out = nullptr;           // bf16 [hidden]
  float* accum = nullptr;
  unsigned* arrivals = nullptr;

  void Call(const Variant& v, size_t i, cudaStream_t stream) const {
    const Copy& c = copies[i];
    const kc::GemvNorm norm{.residual = residual, .ld_residual = hidden,
                            .residual_out = residual_out, .ld_residual_out = hidden,
                            .normed = normed, .ld_normed = hidden, .weight = norm_weight};
    if (v.fused) {
      const kc::GatedMlpGemvArgs a{
          .x = x, .norm = norm, .gate_up = c.gate_up, .gate_up_scales = c.gate_up_scales,
          .down_t = c.down_t, .down_t_scales = c.down_t_scales, .block = 128, .hidden = hidden,
          .inter = inter, .out = out, .accum = accum, .arrivals = arrivals, .pdl = true,
          .bench_no_adds = v.no_adds};
      CHECK_CUDA(kc::LaunchGatedMlpGemv(a, stream));
      return;
    }
    kc::GemvArgs gu{.x = x, .ldx = hidden, .w = c.gate_up, .ldw = hidden, .out = gate_up_out,
                    .ldo = 2 * inter, .m = 1, .n = 2 * inter, .k = hidden,
                    .scales = c.gate_up_scales, .scale_cols = hidden / 128, .block = 128,
                    .norm = norm, .pdl = true};
    CHECK_CUDA(kc::LaunchGemv(gu, stream));
    auto* g = static_cast<__nv_bfloat16*>(gate_up_out);
    const kc::RowsView gate{g, 1, inter, 2 * inter}, up{g + inter, 1, inter, 2 * inter};
    CHECK_CUDA(kc::LaunchSiluMul(gate, up, gate, stream, /*pdl=*/true));
    kc::GemvArgs dn{.x = g, .ldx = 2 * inter, .w = c.down, .ldw = inter, .out = out,
                    .ldo = hidden, .m = 1, .n = hidden, .k = inter, .scales = c.down_scales,
                    .scale_cols = inter / 128, .block = 128, .pdl = true};
    CHECK_CUDA(kc::LaunchGemv(dn, stream));
  }

  std::vector<float> Out() const {
    std::vector<__nv_bfloat16> host(hidden);
    CHECK_CUDA(cudaMemcpy(host.data(), out, hidden * 2, cudaMemcpyDeviceToHost));
    std::vector<float> v(hidden);
    for (int i = 0; i < hidden; ++i) v[i] = __bfloat162float(host[i]);
    return v;
  }
};

// Random E4M3 codes that are never NaN (the lowest exponent bit cleared), scales near 1/64.
std::vector<uint8_t> RandomCodes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xf7u);
  return v;
}
std::vector<float> RandomScales(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(0.5f / 64, 1.5f / 64);
  std::vector<float> v(n);
  for (auto& s : v) s = d(rng);
  return v;
}
// |a - b| within one bf16 rounding of the larger (2^-8 relative), or 1e-3 of the output's scale.
bool CloseToChain(const std::vector<float>& got, const std::vector<float>& want, double* worst) {
  double scale = 0;
  for (const float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  *worst = 0;
  bool ok = true;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double larger = std::max(std::fabs(static_cast<double>(got[i])),
                                   std::fabs(static_cast<double>(want[i])));
    const double tol = std::max(std::ldexp(larger, -8), 1e-3 * scale);
    *worst = std::max(*worst, d / tol);
    if (!(d <= tol)) ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A gated MLP at one row, FP8: three kernels against one"};
  int hidden = 4096, inter = 12288, calls = 144, repeats = 10;
  int64_t rotate_mib = 4096;
  std::string json_path;
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--inter", inter)->capture_default_str();
  app.add_option("--calls", calls, "MLPs per timed graph")->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays (best kept)")->capture_default_str();
  app.add_option("--rotate-mib", rotate_mib, "weight copies cover at least this much")
      ->capture_default_str();
  app.add_option("--json", json_path, "also write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);

  Bench b{.hidden = hidden, .inter = inter};
  const size_t gu_codes = size_t{2} * inter * hidden, dn_codes = size_t{1} * hidden * inter;
  const size_t gu_scales = size_t{2} * inter / 128 * (hidden / 128);
  const size_t dn_scales = size_t{1} * hidden / 128 * (inter / 128);
  const int64_t mlp_bytes = static_cast<int64_t>(gu_codes + dn_codes);
  const int64_t copies = std::max<int64_t>(2, rotate_mib * (1 << 20) / mlp_bytes);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < copies; ++i) {
    Copy c{.gate_up = DeviceAlloc<uint8_t>(gu_codes),
           .gate_up_scales = DeviceAlloc<float>(gu_scales),
           .down = DeviceAlloc<uint8_t>(dn_codes),
           .down_scales = DeviceAlloc<float>(dn_scales),
           .down_t = DeviceAlloc<uint8_t>(dn_codes),
           .down_t_scales = DeviceAlloc<float>(dn_scales)};
    if (i == 0) {  // random: the copy the checks run on
      Upload(c.gate_up, RandomCodes(gu_codes, rng));
      Upload(c.gate_up_scales, RandomScales(gu_scales, rng));
      const std::vector<uint8_t> down = RandomCodes(dn_codes, rng);
      const std::vector<float> down_scales = RandomScales(dn_scales, rng);
      Upload(c.down, down);
      Upload(c.down_scales, down_scales);
      const xserv::kernels::Fp8Blocks t =
          xserv::kernels::TransposeFp8Blocks(down, down_scales, hidden, inter, 128);
      Upload(c.down_t, t.codes);
      Upload(c.down_t_scales, t.scale_inv);
    } else {  // E4M3 0x3c = 1.5, scales 0.0115
      CHECK_CUDA(cudaMemset(c.gate_up, 0x3c, gu_codes));
      CHECK_CUDA(cudaMemset(c.down, 0x3c, dn_codes));
      CHECK_CUDA(cudaMemset(c.down_t, 0x3c, dn_codes));
      CHECK_CUDA(cudaMemset(c.gate_up_scales, 0x3c, gu_scales * 4));
      CHECK_CUDA(cudaMemset(c.down_scales, 0x3c, dn_scales * 4));
      CHECK_CUDA(cudaMemset(c.down_t_scales, 0x3c, dn_scales * 4));
    }
    b.copies.push_back(c);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (void** p : {&b.x, &b.residual, &b.norm_weight}) {
    std::vector<__nv_bfloat16> v(hidden);
    for (auto& e : v) e = __float2bfloat16(p == &b.norm_weight ? 1.0f + 0.1f * normal(rng)
                                                                : normal(rng));
    *p = DeviceAlloc<__nv_bfloat16>(hidden);
    CHECK_CUDA(cudaMemcpy(*p, v.data(), hidden * 2, cudaMemcpyHostToDevice));
  }
  b.residual_out = DeviceAlloc<__nv_bfloat16>(hidden);
  b.normed = DeviceAlloc<__nv_bfloat16>(hidden);
  b.gate_up_out = DeviceAlloc<__nv_bfloat16>(size_t{2} * inter);
  b.out = DeviceAlloc<__nv_bfloat16>(hidden);
  b.accum = DeviceAlloc<float>(hidden);
  b.arrivals = DeviceAlloc<unsigned>(1);
  CHECK_CUDA(cudaMemset(b.accum, 0, hidden * 4));
  CHECK_CUDA(cudaMemset(b.arrivals, 0, 4));

  const std::vector<Variant> variants = {{.name = "chain"},
                                         {.name = "fused", .fused = true},
                                         {.name = "fused-na", .fused = true, .no_adds = true}};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; hidden %d, inter %d, %.1f MB of FP8 weights per MLP, %lld "
              "copies\n", prop.name, prop.multiProcessorCount, hidden, inter, mlp_bytes / 1e6,
              static_cast<long long>(copies));

  b.Call(variants[0], 0, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> want = b.Out();
  bool all_ok = true;
  for (size_t v = 1; v < variants.size(); ++v) {
    if (variants[v].no_adds) continue;
    for (int rep = 0; rep < 3; ++rep) b.Call(variants[v], 0, stream);  // the scratch reused
    CHECK_CUDA(cudaStreamSynchronize(stream));
    double worst = 0;
    const bool ok = CloseToChain(b.Out(), want, &worst);
    std::vector<float> accum(hidden);
    unsigned arrivals = 1;
    CHECK_CUDA(cudaMemcpy(accum.data(), b.accum, accum.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&arrivals, b.arrivals, 4, cudaMemcpyDeviceToHost));
    const bool clean = arrivals == 0 &&
                       std::all_of(accum.begin(), accum.end(), [](float f) { return f == 0; });
    std::printf("check %-10s %s (worst |diff| / tolerance %.3f), scratch %s\n",
                variants[v].name.c_str(), ok ? "ok" : "FAILED", worst, clean ? "zero" : "DIRTY");
    all_ok = all_ok && ok && clean;
  }
  if (!all_ok) return 1;

  std::printf("%-10s %10s %9s\n", "variant", "us/MLP", "GB/s");
  nlohmann::json rows = nlohmann::json::array();
  for (const Variant& v : variants) {
    for (size_t i = 0; i < b.copies.size(); ++i) b.Call(v, i, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const double us = kc::bench::TimeGraphOfCalls(
        [&](int i, cudaStream_t s) { b.Call(v, static_cast<size_t>(i) % b.copies.size(), s); },
        calls, repeats, stream);
    const double gb_s = static_cast<double>(mlp_bytes) / (us * 1e3);
    std::printf("%-10s %10.2f %9.0f\n", v.name.c_str(), us, gb_s);
    std::fflush(stdout);
    rows.push_back({{"variant", v.name}, {"us_per_mlp", us}, {"weight_gb_s", gb_s}});
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"device", prop.name}, {"hidden", hidden}, {"inter", inter},
                        {"rows", rows}}.dump(1)
      << "\n";
  }
  return 0;
}
