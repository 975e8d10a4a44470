// What a profiled engine step should cost at the GPU's limits, per kernel family, for the engine
// bench's reports (issue 9: every result states the roofline and the achieved fraction):
//   matmul     the linear weights streamed (bytes) and 2 * rows * weights flops;
//   attention  the KV cache read (decode: bytes) and the causal score/value products (flops);
//   experts    (MoE) the weights of the experts a step routes to: their number depends on the
//              routing, so the bound assumes uniform routing (the expected count of distinct
//              experts among rows x top-k draws). Pure arithmetic.
#pragma once

#include <cstdint>

#include "common/model_config/model_config.h"

namespace xserv::tools {

// Ceilings of one H200: pure read bandwidth and bf16 GEMM rate as measured (../shared/GPU.md),
// and the FP8 tensor-core rate taken as twice the bf16 one (the datasheet's ratio; not measured).
struct DevicePeaks {
  double read_gb_s = 4220;
  double bf16_tflop_s = 790;
  double fp8_tflop_s = 1580;
};

// One profiled phase of the bench: `batch` sequences each computing `new_tokens` rows per step
// after `context` cached tokens (a decode phase's average context), `logits_rows` lm_head rows.
struct PhaseShape {
  int64_t batch = 1;
  int64_t new_tokens = 1;
  double context = 0;
  int64_t logits_rows = 1;
  double linear_bytes_per_weight = 2;  // bf16; 1 for FP8 weights kept FP8
  // The decoder linears multiply on FP8 tensor cores (W8A8: --fp8-w8a8 above the GEMV's rows).
  bool linear_fp8_math = false;
  // The lm_head likewise: bf16 unless --fp8-lm-head keeps it FP8 (then 1, and FP8 math where the
  // decoder linears have it).
  double lm_head_bytes_per_weight = 2;
  bool lm_head_fp8_math = false;
  // MoE experts: 2 for bf16, 17 / 32 for MXFP4 (4-bit values, one scale byte per 32), 1 for FP8
  // (its 128 x 128 block scales add 4 bytes per 16,384 weights, left out).
  double expert_bytes_per_weight = 2;
  // The KV cache as E4M3 codes with one f32 scale per (token, kv head) for K and for V
  // (--kv-cache-dtype fp8) instead of the compute dtype (bf16).
  bool fp8_kv_cache = false;
};

struct FamilyCost {
  double bytes = 0;      // at least this much is read from HBM
  double flops = 0;      // at the bf16 rate
  double fp8_flops = 0;  // at the FP8 rate
};

// The decoder linears' weights (q, k, v, o, and the MLP or, for MoE, the router) and the lm_head
// of `c`, in parameters.
double DecoderLinearParams(const ModelConfig& c);
double LmHeadParams(const ModelConfig& c);

FamilyCost MatmulCost(const ModelConfig& c, const PhaseShape& s);
FamilyCost AttentionCost(const ModelConfig& c, const PhaseShape& s);
// Experts a layer reads on average for `rows` routed rows under uniform routing:
// E * (1 - (1 - k / E)^rows), from k (one row) up to E.
double ExpectedDistinctExperts(const ModelConfig& c, double rows);
FamilyCost ExpertsCost(const ModelConfig& c, const PhaseShape& s);

// The time a family needs at the peaks (the slower of streaming its bytes and doing its flops),
// and the fraction of that bound a measured time reaches (1 = at the roofline).
double RooflineUs(const FamilyCost& cost, const DevicePeaks& peaks);
double RooflineFraction(const FamilyCost& cost, const DevicePeaks& peaks, double measured_us);

}  // namespace xserv::tools
