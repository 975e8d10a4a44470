// Launcher of a gated MLP at one row as one kernel (gated_mlp_gemv.cu): out = SiluMul(x · gate^T,
// x · up^T) · down^T with FP8 E4M3 block-scaled weights, optionally behind the GEMV's add +
// RMSNorm prologue (GemvNorm). The chain it replaces at batch 1 is three kernels (the gate_up GEMV,
// SiluMul, the down GEMV), each waiting for the whole of the one before: the down projection
// needs every activation. Here the dependency is cut by splitting the sum instead: a CTA takes a
// slice of the intermediate columns, computes its gate, up and activations, multiplies them by
// the matching columns of down and adds that partial output into an f32 accumulator; the last
// CTA to finish rounds the sum to bf16 and clears the accumulator for the next launch. Within a
// CTA the down loads start as soon as a warp is done with its gate and up rows, and each waits
// only for the 16 activations it multiplies.
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
  // E4M3 [hidden, inter] as in the checkpoint, or with down_transposed [inter, hidden] (a layout
  // for benchmarks: a CTA's columns of down are then whole rows).
  const uint8_t* down = nullptr;
  const float* down_scales = nullptr;  // [hidden / block, inter / block] (transposed: swapped)
  bool down_transposed = false;
  int block = 128;
  int hidden = 0, inter = 0;
  void* out = nullptr;  // bf16 [hidden]
  // Scratch the kernel leaves as it found it: all zero before a launch and after it. Launches
  // that share it must not overlap (one stream).
  float* accum = nullptr;        // f32 [accum_copies, hidden]
  unsigned* arrivals = nullptr;  // one counter
  // CTA b adds into copy b % accum_copies (fewer adds queue on each L2 line); the last CTA sums
  // the copies in order.
  int accum_copies = 1;
  int slice = 0;  // intermediate columns per CTA's unit of work: 16, 32 or 64 (0: 32)
  // With down_transposed: CTAs per thread-block cluster (1, 2 or 4), whose partial outputs are
  // summed in distributed shared memory before they are added to the accumulator.
  int cluster = 1;
  bool pdl = false;  // programmatic dependent launch (pdl.cuh)
  // For benchmarks, timing only: the CTAs' partial outputs are never added (out is garbage).
  bool bench_no_adds = false;
};

// FP8 weights in 128-blocks (hidden and inter multiples of 128, inter at most 128 columns per
// SM), x and the norm's vectors as the GEMV's norm prologue takes them.
bool GatedMlpGemvSupports(const GatedMlpGemvArgs& args);

cudaError_t LaunchGatedMlpGemv(const GatedMlpGemvArgs& args, cudaStream_t stream);

}  // namespace xserv::kernels::cuda
