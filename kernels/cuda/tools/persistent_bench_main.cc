// xserv-persistent-bench: a Qwen3-8B FP8 decode step's weight streaming at batch 1 as separate
// GEMV kernels (PDL, one graph) against one persistent kernel whose phases are separated by grid
// barriers, with and without the next phase's first loads issued before each barrier
// (persistent_step.h says why). Layers of qkv 6144x4096, o 4096x4096, gate_up 24576x4096, down
// 4096x12288 (FP8 E4M3, 128x128 block scales; 6.95 GB over 36 layers), optionally with the small
// ops between them as latency phases (3 after qkv: q/k norm, attention, merge; 1 after gate_up:
// SiluMul). Checks that both forms write the same bits in every phase, then prints ms per step
// and the weights' read rate; then the persistent kernel without barriers (its outputs wrong:
// what the phases cost when none waits for the one before), and its shared-memory ring forms
// (the W8A8 one checked against the GEMV within W8A8's error, its bits being other).
//
// Usage: xserv-persistent-bench [--layers 36] [--latency-phases true] [--repeats 20]
//                               [--ring-shapes 5x2048,...]  (W8A8 ring stages x chunk inputs;
//                               suffix t: TMA bulk copies; n: no arithmetic, timing only;
//                               p: weights packed, one bulk copy per chunk; w: a producer warp;
//                               +N after pw: N chunks further ahead into L2)
//                               [--trace-shapes 6x2048pw,...]  (barrier timestamps, one launch)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/tools/bench_util.h"
#include "kernels/cuda/tools/persistent_step.h"
#include "kernels/cuda/tools/persistent_trace.h"

namespace {

using xserv::kernels::cuda::GemvArgs;
using xserv::kernels::cuda::bench::StreamPhase;

struct Matmul {
  int n, k;
};

void* DeviceBytes(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// E4M3 codes of magnitude below 1 (exponent field at most 6) and block scales near 1 / sqrt(k):
// outputs of about unit size, layer after layer.
void FillWeights(const Matmul& m, uint8_t* codes, float* scales, std::mt19937& rng) {
  std::vector<uint8_t> host(static_cast<size_t>(m.n) * m.k);
  // Four codes per draw (n * k is a multiple of 4): 6.95 GB of weights take a quarter of the
  // generator's time that one draw per byte did, host time every device call pays first.
  for (size_t i = 0; i < host.size(); i += 4) {
    const uint32_t r = rng();
    for (int b = 0; b < 4; ++b) {
      const auto byte = static_cast<uint8_t>(r >> (8 * b));
      host[i + b] = static_cast<uint8_t>((byte & 0x80) | (byte % 0x38));
    }
  }
  CHECK_CUDA(cudaMemcpy(codes, host.data(), host.size(), cudaMemcpyHostToDevice));
  const size_t blocks = static_cast<size_t>((m.n + 127) / 128) * ((m.k + 127) / 128);
  std::vector<float> s(blocks);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (float& v : s) v = u(rng) * 2.0f / std::sqrt(static_cast<float>(m.k));
  CHECK_CUDA(cudaMemcpy(scales, s.data(), blocks * 4, cudaMemcpyHostToDevice));
}

// Every phase's output set to 0xff (NaN in bf16), so that one a launch leaves unwritten shows.
void Poison(const std::vector<StreamPhase>& phases, cudaStream_t stream) {
  for (const StreamPhase& p : phases) {
    CHECK_CUDA(cudaMemsetAsync(p.out, 0xff, static_cast<size_t>(p.n) * 2, stream));
  }
}

// Every phase's bf16 output bits, after the stream's work so far.
std::vector<std::vector<uint16_t>> OutputBits(const std::vector<StreamPhase>& phases,
                                              cudaStream_t stream) {
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<std::vector<uint16_t>> bits;
  for (const StreamPhase& p : phases) {
    bits.emplace_back(p.n);
    CHECK_CUDA(cudaMemcpy(bits.back().data(), p.out, static_cast<size_t>(p.n) * 2,
                          cudaMemcpyDeviceToHost));
  }
  return bits;
}

std::vector<float> FloatsOf(const std::vector<uint16_t>& bf16_bits) {
  std::vector<float> v(bf16_bits.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = uint32_t{bf16_bits[i]} << 16;
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A batch-1 FP8 step's weights: separate GEMV kernels vs one persistent kernel"};
  int layers = 36, repeats = 20;
  bool latency_phases = true;
  app.add_option("--layers", layers, "Qwen3-8B layers to stream")->capture_default_str();
  app.add_option("--latency-phases", latency_phases,
                 "the small ops between the matmuls as one-CTA copy phases")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays (best kept)")->capture_default_str();
  std::vector<std::string> ring_shapes = {"5x2048"}, trace_shapes;
  app.add_option("--ring-shapes", ring_shapes,
                 "W8A8 ring shapes, stages x inputs per chunk (persistent_step.h lists them)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--trace-shapes", trace_shapes,
                 "ring shapes (of --ring-shapes) whose barriers to trace in one launch")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  const Matmul qkv{6144, 4096}, o{4096, 4096}, gate_up{24576, 4096}, down{4096, 12288};
  std::mt19937 rng(7);
  // Two output sets (separate kernels, persistent kernel), one buffer per phase.
  std::vector<StreamPhase> phases[2];
  double weight_bytes = 0;
  void* x0 = DeviceBytes(4096 * 2);
  {
    std::vector<uint16_t> x(4096);
    for (uint16_t& v : x) v = static_cast<uint16_t>(0x3f80 | (rng() & 0x7f) | (rng() & 0x8000));
    CHECK_CUDA(cudaMemcpy(x0, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  }
  const void* prev[2] = {x0, x0};
  const auto add = [&](const Matmul* m, int copy_n, int k) {
    uint8_t* codes = nullptr;
    float* scales = nullptr;
    if (m != nullptr) {
      codes = static_cast<uint8_t*>(DeviceBytes(static_cast<size_t>(m->n) * m->k));
      scales = static_cast<float*>(
          DeviceBytes(static_cast<size_t>((m->n + 127) / 128) * ((m->k + 127) / 128) * 4));
      FillWeights(*m, codes, scales, rng);
      weight_bytes += static_cast<double>(m->n) * m->k;
    }
    const int n = m != nullptr ? m->n : copy_n;
    for (int f = 0; f < 2; ++f) {
      void* out = DeviceBytes(static_cast<size_t>(n) * 2);
      CHECK_CUDA(cudaMemset(out, 0xff, static_cast<size_t>(n) * 2));
      phases[f].push_back({.w = codes,
                           .scales = scales,
                           .x = prev[f],
                           .out = out,
                           .n = n,
                           .k = m != nullptr ? m->k : k});
      prev[f] = out;
    }
  };
  for (int l = 0; l < layers; ++l) {
    add(&qkv, 0, 0);
    if (latency_phases) {
      for (int i = 0; i < 3; ++i) add(nullptr, 4096, 4096);  // q/k norm, attention, merge
    }
    add(&o, 0, 0);
    add(&gate_up, 0, 0);
    if (latency_phases) add(nullptr, 12288, 12288);  // SiluMul
    add(&down, 0, 0);
  }
  const int num_phases = static_cast<int>(phases[0].size());

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto separate = [&](int, cudaStream_t s) {
    for (const StreamPhase& p : phases[0]) {
      if (p.w == nullptr) {
        CHECK_CUDA(xserv::kernels::cuda::bench::LaunchCopyPhase(p, s));
        continue;
      }
      const GemvArgs a{.x = p.x,
                       .ldx = p.k,
                       .w = p.w,
                       .ldw = p.k,
                       .out = p.out,
                       .ldo = p.n,
                       .m = 1,
                       .n = p.n,
                       .k = p.k,
                       .scales = p.scales,
                       .scale_cols = (p.k + 127) / 128,
                       .block = 128,
                       .pdl = true};
      CHECK_CUDA(xserv::kernels::cuda::LaunchGemv(a, s));
    }
  };
  auto* device_phases = static_cast<StreamPhase*>(DeviceBytes(sizeof(StreamPhase) * num_phases));
  CHECK_CUDA(cudaMemcpy(device_phases, phases[1].data(), sizeof(StreamPhase) * num_phases,
                        cudaMemcpyHostToDevice));
  auto* barrier = static_cast<unsigned*>(DeviceBytes(4));
  struct RingShape {
    int stages = 5, cols = 2048;
    bool bulk = false;      // suffix "t": the rows copied by the TMA unit
    bool no_math = false;   // suffix "n": streaming only (timing only, outputs zeros)
    bool tiled = false;     // suffix "p": weights packed by PackRingTiles, a bulk copy a chunk
    bool producer = false;  // suffix "w": a producer warp issues the copies
    int l2_ahead = 0;       // suffix "+N" (after w): N chunks further ahead into L2
    std::string Label() const {
      char text[96];
      std::snprintf(text, sizeof(text), "%dx%d%s%s%s%s", stages, cols, bulk ? " TMA" : "",
                    tiled ? " tiled" : "", producer ? " producer" : "", no_math ? " no math" : "");
      std::string label = text;
      if (l2_ahead > 0) label += " L2+" + std::to_string(l2_ahead);
      return label;
    }
  };
  std::vector<RingShape> shapes;
  for (const std::string& text : ring_shapes) {
    RingShape r;
    char suffix[8] = {};
    const int got = std::sscanf(text.c_str(), "%dx%d%7s", &r.stages, &r.cols, suffix);
    std::string flags = got == 3 ? suffix : "";
    if (const size_t plus = flags.find('+'); plus != std::string::npos) {
      r.l2_ahead = std::atoi(flags.c_str() + plus + 1);
      flags.resize(plus);
    }
    if (got < 2 || flags.find_first_not_of("tnpw") != std::string::npos) {
      std::fprintf(stderr, "--ring-shapes: '%s' is not STAGESxCOLS[t][n][p][w][+N]\n",
                   text.c_str());
      return 2;
    }
    r.bulk = flags.find('t') != std::string::npos;
    r.no_math = flags.find('n') != std::string::npos;
    r.tiled = flags.find('p') != std::string::npos;
    r.producer = flags.find('w') != std::string::npos;
    r.bulk = r.bulk || r.tiled || r.producer;
    shapes.push_back(r);
  }
  // The step's phases with their weights packed for each chunk width a tiled shape takes.
  std::map<int, StreamPhase*> tiled_phases;
  for (const RingShape& shape : shapes) {
    if (!shape.tiled || tiled_phases.count(shape.cols) > 0) continue;
    std::vector<StreamPhase> packed = phases[1];
    std::map<const uint8_t*, uint8_t*> done;  // the layers' weights are distinct; still
    for (StreamPhase& p : packed) {
      if (p.w == nullptr) continue;
      uint8_t*& to = done[p.w];
      if (to == nullptr) {
        to = static_cast<uint8_t*>(DeviceBytes(static_cast<size_t>(p.n) * p.k));
        CHECK_CUDA(
            xserv::kernels::cuda::bench::PackRingTiles(p.w, p.n, p.k, shape.cols, to, stream));
      }
      p.w = to;
    }
    auto* device = static_cast<StreamPhase*>(DeviceBytes(sizeof(StreamPhase) * num_phases));
    CHECK_CUDA(cudaMemcpy(device, packed.data(), sizeof(StreamPhase) * num_phases,
                          cudaMemcpyHostToDevice));
    tiled_phases[shape.cols] = device;
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const auto args_of = [&](bool prefetch, bool barriers, bool ring, bool w8a8,
                           const RingShape& shape) {
    return xserv::kernels::cuda::bench::PersistentStepArgs{
        .phases = shape.tiled ? tiled_phases.at(shape.cols) : device_phases,
        .num_phases = num_phases,
        .barrier = barrier,
        .prefetch = prefetch,
        .barriers = barriers,
        .smem_ring = ring,
        .ring_w8a8 = w8a8,
        .ring_stages = shape.stages,
        .ring_chunk_cols = shape.cols,
        .ring_bulk = shape.bulk,
        .ring_no_math = shape.no_math,
        .ring_tiled = shape.tiled,
        .ring_producer_warp = shape.producer,
        .ring_l2_ahead = shape.l2_ahead};
  };
  // One launch: its barrier counter zeroed first.
  const auto launch = [&](const xserv::kernels::cuda::bench::PersistentStepArgs& a,
                          cudaStream_t s) {
    CHECK_CUDA(cudaMemsetAsync(barrier, 0, 4, s));
    CHECK_CUDA(xserv::kernels::cuda::bench::LaunchPersistentStep(a, 12288, s));
  };
  const auto persistent = [&](bool prefetch, bool barriers = true, bool ring = false,
                              bool w8a8 = false, RingShape shape = {}) {
    return [&, prefetch, barriers, ring, w8a8, shape](int, cudaStream_t s) {
      launch(args_of(prefetch, barriers, ring, w8a8, shape), s);
    };
  };

  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; %d layers, %d phases, %.2f GB of FP8 weights\n", prop.name,
              prop.multiProcessorCount, layers, num_phases, weight_bytes / 1e9);
  // Correctness first: one step of each form, every phase's output compared.
  separate(0, stream);
  const std::vector<std::vector<uint16_t>> gemv_bits = OutputBits(phases[0], stream);
  for (const int form : {0, 1, 2}) {  // barriers; + prefetch; the shared-memory ring
    const bool prefetch = form == 1, ring = form == 2;
    Poison(phases[1], stream);
    persistent(prefetch, true, ring)(0, stream);
    const std::vector<std::vector<uint16_t>> bits = OutputBits(phases[1], stream);
    int equal = 0;
    for (int i = 0; i < num_phases; ++i) equal += bits[i] == gemv_bits[i];
    std::printf("persistent%s: %d of %d phase outputs equal the GEMV kernels' bit for bit\n",
                prefetch ? " (prefetch)"
                : ring   ? " (ring)"
                         : "",
                equal, num_phases);
    if (equal != num_phases) return 1;
  }
  // The W8A8 ring in each shape: other bits (x quantised), so the first phase against the
  // GEMV's within W8A8's error, and every phase written (the poison gone) and finite.
  std::vector<RingShape> checked;  // the shapes that passed, timed below
  const std::vector<float> gemv_phase0 = FloatsOf(gemv_bits[0]);
  for (const RingShape& shape : shapes) {
    if (shape.no_math) {  // nothing to check
      checked.push_back(shape);
      continue;
    }
    Poison(phases[1], stream);
    persistent(false, true, false, true, shape)(0, stream);
    const std::vector<std::vector<uint16_t>> bits = OutputBits(phases[1], stream);
    const std::vector<float> got = FloatsOf(bits[0]);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(got[i] - gemv_phase0[i])));
      scale = std::max(scale, static_cast<double>(std::abs(gemv_phase0[i])));
    }
    int finite = 0;
    for (const std::vector<uint16_t>& phase_bits : bits) {
      const std::vector<float> v = FloatsOf(phase_bits);
      finite += std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
    }
    std::printf(
        "persistent (W8A8 ring %s): phase 0 within %.4f of the GEMV's (relative to "
        "its largest output); %d of %d phases written and finite\n",
        shape.Label().c_str(), worst / scale, finite, num_phases);
    if (worst / scale <= 0.05 && finite == num_phases) checked.push_back(shape);
  }
  using xserv::kernels::cuda::bench::TimeGraphOfCalls;
  const double us_separate = TimeGraphOfCalls(separate, 1, repeats, stream);
  const double us_plain = TimeGraphOfCalls(persistent(false), 1, repeats, stream);
  const double us_prefetch = TimeGraphOfCalls(persistent(true), 1, repeats, stream);
  const double us_free = TimeGraphOfCalls(persistent(true, false), 1, repeats, stream);
  const double us_ring = TimeGraphOfCalls(persistent(false, true, true), 1, repeats, stream);
  std::vector<std::pair<std::string, double>> rows = {
      {"separate GEMV kernels", us_separate},
      {"persistent, barriers only", us_plain},
      {"persistent, next loads before each barrier", us_prefetch},
      {"persistent, no barriers (timing only)", us_free},
      {"persistent, shared-memory ring (1 CTA/SM)", us_ring}};
  for (const RingShape& shape : checked) {
    for (const bool barriers : {true, false}) {
      const std::string name =
          "persistent, W8A8 ring " + shape.Label() + (barriers ? "" : ", no barriers");
      rows.emplace_back(name, TimeGraphOfCalls(persistent(false, barriers, false, true, shape), 1,
                                               repeats, stream));
    }
  }
  // One traced launch of each --trace-shapes ring (after an untraced one), with barriers.
  for (const std::string& text : trace_shapes) {
    const auto it = std::find(ring_shapes.begin(), ring_shapes.end(), text);
    if (it == ring_shapes.end()) {
      std::fprintf(stderr, "--trace-shapes: '%s' is not among --ring-shapes\n", text.c_str());
      return 2;
    }
    RingShape shape = shapes[it - ring_shapes.begin()];
    const int ctas = prop.multiProcessorCount;  // the ring runs one CTA per SM
    std::vector<unsigned long long> trace(static_cast<size_t>(num_phases) * ctas *
                                          xserv::kernels::cuda::bench::kTraceFields);
    auto* device_trace = static_cast<unsigned long long*>(DeviceBytes(trace.size() * 8));
    CHECK_CUDA(cudaMemset(device_trace, 0, trace.size() * 8));
    persistent(false, true, false, true, shape)(0, stream);
    auto traced = args_of(false, true, false, true, shape);
    traced.trace = device_trace;
    launch(traced, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemcpy(trace.data(), device_trace, trace.size() * 8, cudaMemcpyDeviceToHost));
    int khz = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    std::printf("barrier trace, W8A8 ring %s (SM clock %d MHz):\n", shape.Label().c_str(),
                khz / 1000);
    xserv::kernels::cuda::bench::PrintBarrierTrace(trace, phases[1], ctas, khz / 1e3);
  }
  for (const auto& [name, us] : rows) {
    std::printf("%-44s %8.1f us/step %7.0f GB/s\n", name.c_str(), us, weight_bytes / (us * 1e3));
  }
  return checked.size() == shapes.size() ? 0 : 1;  // a shape that failed its check: not timed
}
