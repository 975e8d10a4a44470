// xserv-gemv-bench: decode-sized matmuls (m <= 8 rows) on one GPU, cuBLASLt against the own GEMV
// (kernels/cuda/gemv.h) in each of its tiles, with and without programmatic dependent launch,
// reporting µs per call and the weight-read bandwidth. Weights rotate over enough copies that
// every call reads them from HBM (a model streams 15 GB per step; the H200's L2 holds 50 MB).
// Calls are captured into a CUDA graph and replayed, as the decode graphs do.
//
// "chain" rows time RMSNorm -> GEMV pairs (the norm writes the GEMV's x), the pattern PDL is
// for: the GEMV's launch and first weight loads overlap the norm. "-norm-pdl" / "-add-pdl"
// chains launch the norm (with a residual add, its sum out of place) with PDL too; "fused-*"
// rows are the same pairs as one GEMV with the norm as its prologue (gemv.h, GemvNorm; FP8, one
// row). "mma" rows (FP8) time the tensor-core GEMV (fp8_gemv_mma.h) alone. "-cN" rows cap the
// GEMV at N CTAs per SM (GemvArgs::max_ctas_per_sm).
//
// Usage: xserv-gemv-bench [--shapes qkv=6144x4096,...] [--rows 1,2,4,8] [--fp8] [--json FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/fp8_gemv_mma.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/tools/bench_util.h"
#include "nlohmann/json.hpp"

namespace {

using xserv::kernels::cuda::ElemType;
using xserv::kernels::cuda::GemmCall;
using xserv::kernels::cuda::GemmRunner;
using xserv::kernels::cuda::GemvArgs;

struct Shape {
  std::string name;
  int n = 0, k = 0;
};

struct Variant {
  std::string name;
  bool cublas = false;
  int cols = 0, unroll = 0;
  bool pdl = false;
  bool chain = false;  // RMSNorm before each call
  bool norm_pdl = false;  // the chain's norm launched with PDL
  bool add = false;       // the norm adds a residual first (its sum out of place)
  bool fused = false;     // the norm as the GEMV's prologue instead (GemvNorm)
  bool mma = false;       // FP8: the tensor-core GEMV (fp8_gemv_mma.h) instead
  bool one_row = false;   // a form of single-row calls only (the norm prologue)
  int ctas_per_sm = 0;    // GemvArgs::max_ctas_per_sm
};

// One call of `v` on weight copy `i`.
struct Runner {
  GemmRunner* cublas;
  std::vector<void*> weights;
  float* scales = nullptr;  // FP8 only
  void* x = nullptr;        // bf16 [8, k]
  void* x_src = nullptr;    // bf16 [8, k]: the chain's norm input
  void* norm_weight = nullptr;
  void* residual = nullptr;      // bf16 [8, k]
  void* residual_out = nullptr;  // bf16 [8, k]
  void* out = nullptr;      // bf16 [8, n]
  int m = 1;
  Shape shape;
  bool fp8 = false;

  void Call(const Variant& v, size_t i, cudaStream_t stream) const {
    using xserv::kernels::cuda::RowsView;
    const RowsView no_rows{};
    if (v.chain) {
      const RowsView src{x_src, m, shape.k, shape.k};
      const RowsView dst{x, m, shape.k, shape.k};
      CHECK_CUDA(xserv::kernels::cuda::LaunchRmsNorm(
          {.x = src,
           .residual = v.add ? RowsView{residual, m, shape.k, shape.k} : no_rows,
           .residual_out = v.add ? RowsView{residual_out, m, shape.k, shape.k} : no_rows,
           .out = dst,
           .weight = norm_weight,
           .pdl = v.norm_pdl},
          stream));
    }
    if (v.cublas) {
      const GemmCall call{.x = x, .ldx = shape.k, .w = weights[i], .ldw = shape.k, .out = out,
                          .ldo = shape.n, .m = m, .n = shape.n, .k = shape.k};
      const absl::Status status = cublas->Run(call, stream);
      if (!status.ok()) {
        std::fprintf(stderr, "cuBLASLt: %s\n", status.ToString().c_str());
        std::exit(1);
      }
      return;
    }
    GemvArgs a{.x = x, .ldx = shape.k, .w = weights[i], .ldw = shape.k, .out = out,
               .ldo = shape.n, .m = m, .n = shape.n, .k = shape.k, .scales = scales,
               .scale_cols = (shape.k + 127) / 128, .block = fp8 ? 128 : 0, .pdl = v.pdl,
               .tile_cols = v.cols, .tile_unroll = v.unroll,
               .max_ctas_per_sm = v.ctas_per_sm};
    if (v.fused) {
      a.x = x_src;
      a.norm = {.residual = v.add ? residual : nullptr,
                .ld_residual = shape.k,
                .residual_out = v.add ? residual_out : nullptr,
                .ld_residual_out = shape.k,
                .normed = x,
                .ld_normed = shape.k,
                .weight = norm_weight};
    }
    if (v.mma) {
      if (!xserv::kernels::cuda::Fp8MmaGemvSupports(a)) {
        std::fprintf(stderr, "FP8 MMA GEMV does not support m=%d n=%d k=%d\n", m, shape.n,
                     shape.k);
        std::exit(1);
      }
      CHECK_CUDA(xserv::kernels::cuda::LaunchFp8MmaGemv(a, stream));
      return;
    }
    if (!xserv::kernels::cuda::GemvSupports(a)) {
      std::fprintf(stderr, "GEMV does not support m=%d n=%d k=%d\n", m, shape.n, shape.k);
      std::exit(1);
    }
    CHECK_CUDA(xserv::kernels::cuda::LaunchGemv(a, stream));
  }
};

// Best of `repeats` replays of a graph of `calls` calls (rotating weight copies): µs per call.
double TimeVariant(const Runner& r, const Variant& v, int calls, int repeats,
                   cudaStream_t stream) {
  for (size_t i = 0; i < r.weights.size(); ++i) r.Call(v, i, stream);  // plans, attributes
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return xserv::kernels::cuda::bench::TimeGraphOfCalls(
      [&](int i, cudaStream_t s) { r.Call(v, static_cast<size_t>(i) % r.weights.size(), s); },
      calls, repeats, stream);
}

std::vector<Shape> ParseShapes(const std::string& spec) {
  std::vector<Shape> shapes;
  for (const absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::vector<std::string> named = absl::StrSplit(item, '=');
    const std::vector<std::string> dims = absl::StrSplit(named.back(), 'x');
    Shape s{.name = named.size() > 1 ? named[0] : std::string(item)};
    if (dims.size() != 2 || !absl::SimpleAtoi(dims[0], &s.n) || !absl::SimpleAtoi(dims[1], &s.k)) {
      std::fprintf(stderr, "bad shape '%s' (want name=NxK)\n", std::string(item).c_str());
      std::exit(2);
    }
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode-sized matmuls: cuBLASLt vs the own GEMV tiles, with and without PDL"};
  std::string shapes_spec =
      "qkv=6144x4096,o=4096x4096,gate_up=24576x4096,down=4096x12288,lm_head=151936x4096,"
      "oss_qkv=5120x2880,oss_o=2880x4096,oss_lm_head=201088x2880";
  std::string rows_spec = "1,2,4,8";
  std::string json_path;
  bool fp8 = false;
  int calls = 200, repeats = 5;
  int64_t rotate_mib = 512;
  app.add_option("--shapes", shapes_spec, "name=NxK,... (out features x in features)")
      ->capture_default_str();
  app.add_option("--rows", rows_spec, "x rows (m) to time, 1..8")->capture_default_str();
  app.add_option("--calls", calls, "calls per timed graph")->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays (best kept)")->capture_default_str();
  app.add_option("--rotate-mib", rotate_mib, "weight copies per shape cover at least this much")
      ->capture_default_str();
  app.add_flag("--fp8", fp8, "FP8 E4M3 weights with 128x128 block scales (GEMV only)");
  app.add_option("--json", json_path, "also write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);

  std::vector<int> rows;
  for (const absl::string_view r : absl::StrSplit(rows_spec, ',', absl::SkipEmpty())) {
    int m = 0;
    if (!absl::SimpleAtoi(r, &m) || m < 1 || m > 8) {
      std::fprintf(stderr, "bad --rows\n");
      return 2;
    }
    rows.push_back(m);
  }
  std::vector<Variant> variants;
  if (!fp8) variants.push_back({.name = "cublas", .cublas = true});
  variants.push_back({.name = "gemv-auto"});
  for (const auto& [cols, unroll] : std::vector<std::pair<int, int>>{
           {1, 4}, {1, 8}, {2, 4}, {4, 2}, {4, 4}}) {
    variants.push_back({.name = "gemv-" + std::to_string(cols) + "x" + std::to_string(unroll),
                        .cols = cols, .unroll = unroll});
  }
  if (!fp8) variants.push_back({.name = "chain-cublas", .cublas = true, .chain = true});
  variants.push_back({.name = "chain-gemv", .chain = true});
  variants.push_back({.name = "chain-gemv-pdl", .pdl = true, .chain = true});
  variants.push_back({.name = "chain-norm-pdl", .pdl = true, .chain = true, .norm_pdl = true});
  variants.push_back(
      {.name = "chain-add-pdl", .pdl = true, .chain = true, .norm_pdl = true, .add = true});
  // The grid capped below what fits, so the next call's CTAs may be resident early.
  variants.push_back({.name = "gemv-pdl", .pdl = true});
  for (const int ctas : {1, 2}) {  // the default: all that fit (3 at one FP8 row, 6 bf16)
    const std::string c = "-c" + std::to_string(ctas);
    variants.push_back({.name = "gemv-pdl" + c, .pdl = true, .ctas_per_sm = ctas});
    variants.push_back({.name = "chain-norm-pdl" + c, .pdl = true, .chain = true,
                        .norm_pdl = true, .ctas_per_sm = ctas});
  }
  if (fp8) {  // the GEMV's norm prologue is FP8-only (gemv.h)
    variants.push_back({.name = "fused-norm-pdl", .pdl = true, .fused = true, .one_row = true});
    variants.push_back(
        {.name = "fused-add-pdl", .pdl = true, .add = true, .fused = true, .one_row = true});
    variants.push_back({.name = "mma", .mma = true});
    variants.push_back({.name = "mma-pdl", .pdl = true, .mma = true});
  }

  auto cublas = GemmRunner::Create({});
  if (!cublas.ok()) {
    std::fprintf(stderr, "%s\n", cublas.status().ToString().c_str());
    return 1;
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; weights %s\n", prop.name, prop.multiProcessorCount,
              fp8 ? "FP8 E4M3 (128x128 block scales)" : "bf16");
  std::printf("%-12s %2s %-16s %10s %9s\n", "shape", "m", "variant", "us/call", "GB/s");
  nlohmann::json out = nlohmann::json::array();
  for (const Shape& shape : ParseShapes(shapes_spec)) {
    const int64_t weight_bytes = static_cast<int64_t>(shape.n) * shape.k * (fp8 ? 1 : 2);
    const int64_t copies =
        std::max<int64_t>(2, (rotate_mib * (1 << 20) + weight_bytes - 1) / weight_bytes);
    Runner r{.cublas = cublas->get(), .shape = shape, .fp8 = fp8};
    for (int64_t i = 0; i < copies; ++i) {
      void* w = nullptr;
      CHECK_CUDA(cudaMalloc(&w, weight_bytes));
      CHECK_CUDA(cudaMemset(w, 0x3c, weight_bytes));  // bf16 0x3c3c = 0.0115; E4M3 0x3c = 1.5
      r.weights.push_back(w);
    }
    const int64_t scale_bytes = ((shape.n + 127) / 128) * ((shape.k + 127) / 128) * 4;
    if (fp8) {
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&r.scales), scale_bytes));
      CHECK_CUDA(cudaMemset(r.scales, 0x3c, scale_bytes));  // 0.0115
    }
    for (void** p : {&r.x, &r.x_src, &r.residual, &r.residual_out}) {
      CHECK_CUDA(cudaMalloc(p, 8LL * shape.k * 2));
      CHECK_CUDA(cudaMemset(*p, 0x3c, 8LL * shape.k * 2));
    }
    CHECK_CUDA(cudaMalloc(&r.norm_weight, shape.k * 2LL));
    CHECK_CUDA(cudaMemset(r.norm_weight, 0x3c, shape.k * 2LL));
    CHECK_CUDA(cudaMalloc(&r.out, 8LL * shape.n * 2));
    for (const int m : rows) {
      r.m = m;
      if (static_cast<int64_t>(m) * shape.k * 2 > xserv::kernels::cuda::kGemvMaxSharedBytes) {
        std::printf("%-12s %2d (x does not fit the GEMV's shared memory)\n", shape.name.c_str(), m);
        continue;
      }
      for (const Variant& v : variants) {
        if (v.one_row && m != 1) continue;
        const double us = TimeVariant(r, v, calls, repeats, stream);
        const double gb_s = static_cast<double>(weight_bytes) / (us * 1e3);
        std::printf("%-12s %2d %-16s %10.2f %9.0f\n", shape.name.c_str(), m, v.name.c_str(), us,
                    gb_s);
        std::fflush(stdout);
        out.push_back({{"shape", shape.name}, {"n", shape.n}, {"k", shape.k}, {"m", m},
                       {"variant", v.name}, {"fp8", fp8}, {"us_per_call", us},
                       {"weight_gb_s", gb_s}});
      }
    }
    for (void* w : r.weights) CHECK_CUDA(cudaFree(w));
    for (void* p : {static_cast<void*>(r.scales), r.x, r.x_src, r.norm_weight, r.residual,
                    r.residual_out, r.out}) {
      CHECK_CUDA(cudaFree(p));
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"device", prop.name}, {"rows", out}}.dump(1) << "\n";
  }
  return 0;
}
