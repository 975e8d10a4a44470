#include "worker/tools/roofline.h"

#include <algorithm>
#include <cmath>

namespace xserv::tools {

double DecoderLinearParams(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
  const double attention = h * d * (2.0 * c.num_heads + 2.0 * c.num_kv_heads);
  const double mlp = c.moe.IsMoe() ? h * static_cast<double>(c.moe.num_experts)  // the router
                                    : (c.architecture == Architecture::kGpt2 ? 2.0 : 3.0) * h *
                                          static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.num_layers) * (attention + mlp);
}

double LmHeadParams(const ModelConfig& c) {
  return static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size);
}

FamilyCost MatmulCost(const ModelConfig& c, const PhaseShape& s) {
  const double rows = static_cast<double>(s.batch * s.new_tokens);
  FamilyCost cost;
  cost.bytes = DecoderLinearParams(c) * s.linear_bytes_per_weight +
               LmHeadParams(c) * s.lm_head_bytes_per_weight;
  const double linear_flops = 2.0 * rows * DecoderLinearParams(c);
  const double lm_head_flops = 2.0 * static_cast<double>(s.logits_rows) * LmHeadParams(c);
  (s.linear_fp8_math ? cost.fp8_flops : cost.flops) += linear_flops;
  (s.lm_head_fp8_math ? cost.fp8_flops : cost.flops) += lm_head_flops;
  return cost;
}

FamilyCost AttentionCost(const ModelConfig& c, const PhaseShape& s) {
  const double layers = static_cast<double>(c.num_layers), d = static_cast<double>(c.head_dim);
  const double n = static_cast<double>(s.new_tokens);
  // Keys each new row sees: the context plus the new rows up to itself (causal).
  const double keys_per_row = s.context + (n + 1.0) / 2.0;
  // K and V of one token: bf16, or E4M3 codes and an f32 scale per kv head.
  const double kv_row_bytes =
      2.0 * static_cast<double>(c.num_kv_heads) * (s.fp8_kv_cache ? d + 4.0 : d * 2.0);
  FamilyCost cost;
  // Every sequence's cache is read once (a prefill reads its new rows' keys too).
  cost.bytes = layers * static_cast<double>(s.batch) * (s.context + n) * kv_row_bytes;
  // q·k and p·v: 2 flops per multiply-add, head_dim each, per head and key.
  cost.flops = layers * static_cast<double>(s.batch) * n * keys_per_row *
               static_cast<double>(c.num_heads) * d * 4.0;
  return cost;
}

double ExpectedDistinctExperts(const ModelConfig& c, double rows) {
  const double e = static_cast<double>(c.moe.num_experts);
  const double k = static_cast<double>(c.moe.num_experts_per_tok);
  if (e <= 0 || rows <= 0) return 0.0;
  return e * (1.0 - std::pow(1.0 - k / e, rows));
}

FamilyCost ExpertsCost(const ModelConfig& c, const PhaseShape& s) {
  const double rows = static_cast<double>(s.batch * s.new_tokens);
  // gate, up and down of one expert.
  const double expert_params =
      3.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.intermediate_size);
  const double layers = static_cast<double>(c.num_layers);
  FamilyCost cost;
  cost.bytes = layers * ExpectedDistinctExperts(c, rows) * expert_params * s.expert_bytes_per_weight;
  cost.flops = layers * 2.0 * rows * static_cast<double>(c.moe.num_experts_per_tok) *
               expert_params;
  return cost;
}

double RooflineUs(const FamilyCost& cost, const DevicePeaks& peaks) {
  const double read_us = cost.bytes / (peaks.read_gb_s * 1e9) * 1e6;
  const double math_us = cost.flops / (peaks.bf16_tflop_s * 1e12) * 1e6 +
                         cost.fp8_flops / (peaks.fp8_tflop_s * 1e12) * 1e6;
  return std::max(read_us, math_us);
}

double RooflineFraction(const FamilyCost& cost, const DevicePeaks& peaks, double measured_us) {
  return measured_us > 0 ? RooflineUs(cost, peaks) / measured_us : 0.0;
}

}  // namespace xserv::tools
