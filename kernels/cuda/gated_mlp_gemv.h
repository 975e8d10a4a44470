// Launcher of a gated MLP at one row as one kernel (gated_mlp_gemv.cu): out = SiluMul(x · gate^T,
// x · up^T) · down^T with FP8 E4M3 block-scaled weights, optionally behind the GEMV's add +
// RMSNorm prologue (GemvNorm). The chain it replaces at batch 1 is three kernels (the gate_up GEMV,
// SiluMul, the down GEMV), each waiting for the whole of the one before: the down projection
// needs every activation. Here the dependency is cut by splitting the sum instead: a CTA takes 32
// of the intermediate columns, computes their gate, up and activations, multiplies them by the
// matching rows of down transposed, and adds that partial output into an f32 accumulator; the last
// CTA to finish rounds the sum to bf16 and clears the accumulator for the next launch.
//
// Down comes transposed ([inter, hidden], a copy made at load): a CTA's 32 columns of down as in
// the checkpoint are 32-byte pieces of 4,096 rows, which streamed at ~2/3 of the rate of whole
// rows (xserv-mlp-bench, docs/benchmarks session 34).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/gemv.h"

namespace xserv::kernels::cuda {

struct GatedMlpGemvArgs {
  const void* x = nullptr;  // bf16 [hidden]; with norm.weight: the previous block's output
  GemvNorm norm;            // the GEMV's norm prologue (gemv.h); norm.weight null: none
  const uint8_t* gate_up = nullptr;       // E4M3 [2 * inter, hidden]: gate rows, then up rows
  const float* gate_up_scales = nullptr;  // [2 * inter / block, hidden / block]
  const uint8_t* down_t = nullptr;        // E4M3 [inter, hidden]: down transposed
  const float* down_t_scales = nullptr;   // [inter / block, hidden / block]
  int block = 128;
  int hidden = 0, inter = 0;
  // bf16 [hidden]. Written by the last CTA once every CTA has staged x: it may be x itself, or
  // the norm's x or residual (not its residual_out or normed, which CTA 0 writes).
  void* out = nullptr;
  // Scratch the kernel leaves as it found it: all zero before a launch and after it. Launches
  // that share it must not overlap (one stream).
  float* accum = nullptr;        // f32 [hidden]
  unsigned* arrivals = nullptr;  // one counter
  bool pdl = false;  // programmatic dependent launch (pdl.cuh)
  // For benchmarks, timing only: the partial outputs are never added (out is garbage).
  bool bench_no_adds = false;
};

// FP8 weights in 128-blocks, inter a multiple of 64 (whole pairs of 32-column units), x and the
// norm's vectors as the GEMV's norm prologue takes them, 16-byte aligned pointers.
bool GatedMlpGemvSupports(const GatedMlpGemvArgs& args);

cudaError_t LaunchGatedMlpGemv(const GatedMlpGemvArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
