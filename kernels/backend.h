// The op API: every model is written once against `Backend` and runs on the CPU backend
// (kernels/cpu: fp32 reference, CI and demo engine, numeric oracle) or the CUDA backend
// (kernels/cuda: bf16 storage, fp32 accumulation). Each CUDA op is tested against its CPU twin.
//
// Ownership and threading: a Backend is created once per worker process and used only by the
// engine-loop thread (ops are not thread-safe and may keep per-call scratch). Ops never allocate
// device memory in steady state except through Allocate(); they validate shapes and dtypes and
// return InvalidArgument on misuse instead of computing garbage. Outputs may alias inputs only
// where an op says so.
//
// Layout conventions:
//   activations  [tokens, features] row-major; attention heads as [tokens, heads, head_dim]
//   weights      HF Linear layout [out_features, in_features]; bias [out_features]
//   KV cache     per layer K and V: [num_blocks, block_size, num_kv_heads, head_dim]
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/sampling.h"
#include "kernels/tensor.h"

namespace xserv::kernels {

// Paged-attention metadata of one step, planned once per step by the model runner and shared by
// every layer. Trivially copyable; the tensors live on the backend's device.
struct AttentionBatch {
  Tensor query_start;   // i32 [num_seqs + 1]: sequence s owns query rows [qs[s], qs[s+1])
  Tensor seq_lens;      // i32 [num_seqs]: KV length of s after this step (context + new tokens)
  Tensor block_tables;  // i32 [num_seqs, max_blocks_per_seq]: physical block ids
  Tensor slot_mapping;  // i32 [num_tokens]: KV slot (block * block_size + offset) per new token
  int num_seqs = 0;
  int max_query_len = 0;
  // Which new-row counts the step's sequences have: bit i - 1 for i new rows (1 <= i <= 31),
  // bit 31 for 32 or more. 0: not known (a backend then assumes any). Lets a backend skip a
  // kernel no sequence of the step needs.
  uint32_t query_len_mask = 0;
  int max_seq_len = 0;
  int block_size = 16;
};

// One layer's paged KV storage.
struct KvLayer {
  Tensor k;  // [num_blocks, block_size, num_kv_heads, head_dim]: the compute dtype, or F8E4M3
  Tensor v;  // same shape and dtype
  // FP8 KV cache only (k, v F8E4M3): f32 [num_blocks, block_size, num_kv_heads], the scale of
  // each (slot, kv head): value = E4M3(code) * scale. WriteKv makes both from a new key or value
  // as kernels/fp8.h QuantizeFp8Group does: scale = amax / 448 over the head's head_dim values
  // (1 when they are all 0), codes = E4M3(value / scale), round to nearest even, saturating.
  // Scaled per token and head, the cache needs no calibration and keeps outliers of one token
  // from coarsening another's codes.
  Tensor k_scale, v_scale;
  bool fp8() const { return k.dtype == DType::kF8E4M3; }
};

struct AttentionParams {
  float scale = 1.0f;          // applied to q·k (usually 1/sqrt(head_dim))
  int sliding_window = 0;      // > 0: a query at position p sees keys in (p - window, p]
  const Tensor* sinks = nullptr;  // optional f32/bf16 [num_heads]: extra softmax logit per head
};

// The first entry of a sequence's block table that Attention reads: with a sliding window, the
// blocks wholly before its first new row's window are never read (a KV manager may have released
// them: worker/engine/block_manager.h), so backends check only the entries from here on.
inline int64_t FirstReadBlock(int64_t seq_len, int64_t q_len, int64_t block_size,
                              int sliding_window) {
  if (sliding_window <= 0) return 0;
  const int64_t first_key = seq_len - q_len - sliding_window + 1;
  return first_key > 0 ? first_key / block_size : 0;
}

// What QkNormRopeWriteKv does to the step's new queries and keys before they are cached. Null
// pointers leave a stage out.
struct QkNormRope {
  const Tensor* q_norm = nullptr;  // [head_dim] RMSNorm weight of every query head (Qwen3)
  const Tensor* k_norm = nullptr;  // [head_dim] of every key head; with q_norm or neither
  float eps = 1e-6f;
  const Tensor* positions = nullptr;  // i32 [T]; with cos_sin
  const Tensor* cos_sin = nullptr;    // as Rope's; null: no rotary embedding
};

// Expert weights of one MoE layer. gpt-oss layout: gate_up rows interleave gate (even) and up
// (odd) features.
struct ExpertWeights {
  enum class Format { kDense, kMxfp4, kFp8 };
  Format format = Format::kDense;
  Tensor gate_up;        // kDense: [E, 2*I, H]
  Tensor gate_up_bias;   // [E, 2*I]
  Tensor down;           // kDense: [E, H, I]
  Tensor down_bias;      // [E, H]
  // kMxfp4 (HF checkpoint layout): u8 blocks [E, rows, in/32, 16] and u8 scales [E, rows, in/32].
  // kFp8: u8 E4M3 codes [E, rows, in] in the _blocks tensors and f32 scales of 128 x 128 blocks
  // (kFp8ExpertBlock) [E, ceil(rows/128), ceil(in/128)] (kernels/fp8.h per expert) in the
  // _scales tensors; a weight is code * scale. Backends may take only dense experts (the CPU's).
  Tensor gate_up_blocks, gate_up_scales, down_blocks, down_scales;
};
// The block of ExpertWeights::Format::kFp8's scales.
inline constexpr int64_t kFp8ExpertBlock = 128;

// FP8 E4M3 weights with block scales, as kernels/fp8.h lays them out (HF "fp8" checkpoints):
// w[n, k] = E4M3(codes[n, k]) * scales[n / block, k / block].
struct Fp8Weight {
  Tensor codes;   // u8 [N, K]
  Tensor scales;  // f32 [ceil(N / block), ceil(K / block)]
  int64_t block = 128;
  // Optional, where Backend::WantsFp8RowScales: the same scales once per row,
  // f32 [ceil(K / block), N] (kernels/fp8.h Fp8RowScales); empty: none. Results do not change.
  Tensor row_scales;
};

// A block's pre-norm ahead of its first projection (Backend::AddRmsNormMatmul). What the op
// writes (residual_out, normed, the projection's out) overlaps neither x nor residual nor each
// other.
struct PreNorm {
  Tensor x;             // [R, H]: the previous block's output
  Tensor residual;      // [R, H]: the residual stream before it (only read)
  Tensor residual_out;  // [R, H]: gets residual + x; overlaps neither residual nor x
  Tensor weight;        // [H]
  float eps = 1e-6f;
  Tensor normed;        // [R, H]: gets RmsNorm(residual_out) * weight, the projection's input
};

// A matmul's weight: [N, K] of the compute dtype, or FP8 codes with block scales (one of them).
struct MatmulWeight {
  const Tensor* dense = nullptr;
  const Fp8Weight* fp8 = nullptr;
};

// gpt-oss clamped GLU: g = min(gate, limit); u = clamp(up, -limit, limit);
// out = (u + 1) * g * sigmoid(alpha * g).
struct GluParams {
  float limit = 7.0f;
  float alpha = 1.702f;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceType device() const = 0;
  virtual std::string name() const = 0;
  // The dtype weights and activations are stored in on this backend (CPU: f32, CUDA: bf16).
  virtual DType compute_dtype() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  virtual absl::StatusOr<Buffer> Allocate(DType dtype, std::span<const int64_t> shape) = 0;
  absl::StatusOr<Buffer> Allocate(DType dtype, std::initializer_list<int64_t> shape) {
    return Allocate(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Host bytes (same dtype, contiguous) into a contiguous device tensor.
  virtual absl::Status CopyFromHost(const void* src, const Tensor& dst) = 0;
  // A contiguous device tensor into host memory of dst.nbytes().
  virtual absl::Status CopyToHost(const Tensor& src, void* dst) = 0;
  // Element-wise copy with dtype conversion between float dtypes (f32, bf16, f16); shapes equal.
  virtual absl::Status Convert(const Tensor& src, const Tensor& dst) = 0;
  // Waits for all queued work (a no-op on the CPU).
  virtual absl::Status Synchronize() = 0;

  // ---- embedding, norms, elementwise ----------------------------------------------------------
  // out[t] = table[ids[t]] (or out[t] += table[ids[t]] when accumulate); ids i32 [T] < V.
  virtual absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                                 bool accumulate) = 0;
  // One tensor-parallel rank's rows of a vocab-parallel table ([R, H], ids first_id ..
  // first_id + R - 1): out[t] = table[ids[t] - first_id] for ids in the shard, zeros for the
  // others (the sum over the ranks gives every token its row). Ids must be >= 0. On the device,
  // unlike a host-side remap, so a decode graph can hold it.
  virtual absl::Status EmbeddingShard(const Tensor& table, const Tensor& ids, int64_t first_id,
                                      const Tensor& out) = 0;
  // out = x / rms(x) * weight over the last dim; out may alias x. x [R, H] or [R, heads, H].
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                               const Tensor& out) = 0;
  // residual += x; out = RmsNorm(residual). Fused add + norm of the pre-norm residual stream.
  virtual absl::Status AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                  float eps, const Tensor& out) = 0;
  // out = (x - mean) / sqrt(var + eps) * weight + bias over the last dim; out may alias x.
  virtual absl::Status LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 float eps, const Tensor& out) = 0;
  // out = a + b (same shape); out may alias a or b.
  virtual absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // ---- linear algebra -------------------------------------------------------------------------
  // out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]). x rows may be strided; out contiguous.
  virtual absl::Status Matmul(const Tensor& x, const Tensor& w, const Tensor* bias,
                              const Tensor& out) = 0;
  // Matmul with FP8 block-scaled weights (W8A16): out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]),
  // w dequantised as Fp8Weight says. Same x / out / bias rules as Matmul.
  virtual absl::Status MatmulFp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias,
                                 const Tensor& out) = 0;
  // A block's pre-norm and its first projection: residual_out = residual + x, normed =
  // RmsNorm(residual_out) * weight (as AddRmsNorm, but with the sum in residual_out), then out =
  // normed · w^T (+ bias) by Matmul or MatmulFp8, bit for bit. The default runs Add, RmsNorm and
  // the matmul; a backend may fuse them (CUDA: the decode GEMV normalises in its prologue).
  virtual absl::Status AddRmsNormMatmul(const PreNorm& norm, const MatmulWeight& w,
                                        const Tensor* bias, const Tensor& out);
  // Whether the models should hand each block's pre-norm to its first projection
  // (AddRmsNormMatmul), their residual stream then alternating between two buffers: CUDA with FP8
  // weights and --fuse-norm-gemv (the single-row GEMV does the norm) or --fuse-norm-quant (the
  // norm writes the W8A8 activation codes).
  virtual bool FusesNormIntoMatmul() const { return false; }
  // Whether FP8 weights should come with Fp8Weight::row_scales (made at load): CUDA's W8A8 GEMM
  // runs faster at small batches with a scale per weight row (--fp8-w8a8-row-scales-rows).
  virtual bool WantsFp8RowScales() const { return false; }
  // Whether MatmulFp8 multiplies an [n, k] FP8 weight of `block` x `block` scales at any row
  // count without decoding all of it on every call (CUDA: only the W8A8 GEMM's shapes, with
  // fp8_w8a8, go past the decode GEMV's rows). The lm_head stays FP8 (--fp8-lm-head) only where
  // this holds: decoding 0.6 GB per batched step costs more than its bytes save at one row. The
  // CPU reference decodes every call anyway and says true, so that its tests take the FP8 path.
  virtual bool Fp8MatmulAtAnyRows(int64_t n, int64_t k, int64_t block) const {
    (void)n, (void)k, (void)block;
    return true;
  }
  // A hint that `weight` ([N, K] row-major: a dense weight, or an FP8 weight's codes) is the
  // weight of the matmul after the next one (Matmul, MatmulFp8, MatmulSiluMul or
  // AddRmsNormMatmul), with only latency-bound ops between them. A backend may start reading
  // part of it into its cache as the next matmul ends (CUDA, l2_prefetch.h). Never changes a
  // result; the next matmul op consumes the hint whatever it runs.
  virtual void PrefetchAfterNextMatmul(const Tensor& weight) { (void)weight; }
  // out[L, H] = x[idx[l], :]; idx i32 [L].
  virtual absl::Status GatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) = 0;

  // ---- positions and attention ----------------------------------------------------------------
  // In-place rotary embedding, NeoX (rotate-half) layout, on x [T, heads, head_dim] at
  // positions i32 [T]. cos_sin f32 [max_positions, head_dim]: cos in the first half, sin in the
  // second (see kernels/rope_table.h; scaling variants are folded into the table).
  virtual absl::Status Rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin) = 0;
  // Writes the step's new keys and values k, v [T, kv_heads, head_dim] into their slots
  // (quantised, with their scales, into an FP8 cache: KvLayer).
  virtual absl::Status WriteKv(const Tensor& k, const Tensor& v, const KvLayer& kv,
                               const Tensor& slot_mapping) = 0;
  // The attention block's step between the projections and Attention, on q [T, heads,
  // head_dim], k and v [T, kv_heads, head_dim] (token-strided, heads packed): per-head RMSNorm of
  // q and k, then rotary embedding of both, in place, then WriteKv of k and v. Exactly the ops
  // RmsNorm, RmsNorm, Rope, Rope, WriteKv in that order, which is what this default does; a
  // backend may fuse them (CUDA: one kernel, bit-identical to its separate ops).
  virtual absl::Status QkNormRopeWriteKv(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const QkNormRope& p, const KvLayer& kv,
                                         const Tensor& slot_mapping);
  // Whether QkNormRopeWriteKv on column slices of one [T, (heads + 2 kv_heads) * head_dim]
  // projection costs no more than on packed q/k/v (the default normalises such slices one head
  // at a time: cheap on the CPU, a launch per head on a GPU). The models then stack their q, k
  // and v weights into one projection: one GEMM per layer instead of three.
  virtual bool TakesStridedQkNormRope(int64_t head_dim) const;
  // Causal attention of q [T, heads, head_dim] over the paged KV of each sequence (written by
  // WriteKv first), GQA by heads / kv_heads. out [T, heads, head_dim]. An FP8 cache is read as
  // its codes times their scales.
  virtual absl::Status Attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                                 const AttentionParams& params, const Tensor& out) = 0;

  // ---- activations ----------------------------------------------------------------------------
  // out = silu(gate) * up; [R, I] each (gate/up may be strided column slices).
  virtual absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // A gated MLP's gate_up projection and activation: gate_up = x · w^T with w's rows [gate; up]
  // (2I of them), then act = silu(gate) * up of its halves, equal to Matmul then SiluMul bit for
  // bit. gate_up [R, 2I] is scratch, act [R, I] (it may be gate_up's gate half). The default runs
  // those two ops; a backend may skip gate_up (CUDA: SiluMul as the single-row GEMV's epilogue).
  virtual absl::Status MatmulSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                     const Tensor& act);
  // A gated MLP's activation and its FP8 down projection: act = silu(gate) * up (SiluMul), then
  // out = act · w^T (MatmulFp8), equal to those two ops bit for bit, act included (it may be gate
  // itself); the default runs them. A backend may fuse them (CUDA with fuse_silu_quant: above 8
  // rows the activation kernel also writes the W8A8 GEMM's activation codes).
  virtual absl::Status SiluMulMatmulFp8(const Tensor& gate, const Tensor& up, const Tensor& act,
                                        const Fp8Weight& w, const Tensor& out);
  // GELU, tanh approximation (GPT-2's gelu_new); out may alias x.
  // Whether a gated MLP's FP8 down projection ([hidden, inter], `block` x `block` scales) should
  // also come transposed, made at load, for GatedMlpRowFp8 (CUDA with fused_mlp_row, on the
  // shapes where its one-kernel form measured faster than the separate ops).
  virtual bool WantsFp8DownTransposed(int64_t hidden, int64_t inter, int64_t block) const;
  // A gated MLP at one row with FP8 weights as one op: out [1, H] = SiluMul(gate, up) · down^T,
  // where [gate, up] = x · gate_up^T (gate_up [2 I, H], the gate rows first) and x is `normed`
  // [1, H], or with `norm` the block's pre-norm, computed and written first as AddRmsNormMatmul
  // writes it (x = norm->normed). down_t is down transposed ([I, H], WantsFp8DownTransposed).
  // Unimplemented, having run nothing, where the backend has no such form for the operands (the
  // default): the caller then runs the separate ops. Equal to them within a bf16 rounding (the
  // partial sums may add in another order), not bit for bit.
  virtual absl::Status GatedMlpRowFp8(const PreNorm* norm, const Tensor& normed,
                                      const Fp8Weight& gate_up, const Fp8Weight& down_t,
                                      const Tensor& out);
  virtual absl::Status GeluTanh(const Tensor& x, const Tensor& out) = 0;

  // ---- mixture of experts ---------------------------------------------------------------------
  // Top-k of logits f32 [T, E] per row (ties: lower expert id), then softmax over the k selected
  // logits. ids i32 [T, k] in descending logit order, weights f32 [T, k].
  virtual absl::Status RouterTopK(const Tensor& logits, const Tensor& ids,
                                  const Tensor& weights) = 0;
  // out[t] = sum_j weights[t, j] * Expert_{ids[t, j]}(x[t]) where
  // Expert_e(v) = down_e · Glu(gate_up_e · v + gate_up_bias_e) + down_bias_e.
  virtual absl::Status Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                               const ExpertWeights& experts, const GluParams& glu,
                               const Tensor& out) = 0;
  // The MoE block's end and the next pre-norm in one op: Experts(x, ..., out), then
  // AddRmsNorm(out, residual, norm_weight, eps, normed). This default runs exactly those two; a
  // backend may fold the experts' combine into the norm (CUDA, --fuse-moe-norm), bit-identical,
  // and then leaves `out` (scratch of Experts' output shape) unwritten.
  virtual absl::Status ExpertsAddRmsNorm(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                         const ExpertWeights& experts, const GluParams& glu,
                                         const Tensor& out, const Tensor& residual,
                                         const Tensor& norm_weight, float eps,
                                         const Tensor& normed);

  // ---- logits ---------------------------------------------------------------------------------
  // Row-wise log-softmax of f32 [R, V]; out may alias x.
  virtual absl::Status LogSoftmax(const Tensor& x, const Tensor& out) = 0;
  // ids[r] = the index of row r's largest value of f32 x [R, V]: ties go to the lowest index,
  // NaN is skipped, an all-NaN row gives 0 (the host sampler's greedy rule). ids: i32 [R]. Lets
  // greedy decoding copy R ids to the host instead of R x V logits.
  virtual absl::Status ArgMax(const Tensor& x, const Tensor& ids) = 0;
  // results[r] = SampleRowReference(row r of f32 `logits` [R, V], rows[r]) (kernels/sampling.h):
  // adjustments, the draw, and logprobs of the raw distribution, so that only R small results
  // cross to the host. Exact, except that a device may draw the neighbouring token where the
  // uniform falls within rounding of a probability boundary (sums in another order). `logits` may
  // be overwritten. rows and results hold R entries; InvalidArgument for specs out of range.
  virtual absl::Status Sample(const Tensor& logits, std::span<const SampleRowSpec> rows,
                              std::span<SampleRowResult> results) = 0;
  // Every element of contiguous `t` set to zero (any dtype).
  virtual absl::Status Zero(const Tensor& t) = 0;

  // ---- graphs (optional) ----------------------------------------------------------------------
  // Between BeginCapture and EndCapture ops are recorded instead of run (no op may copy to or
  // from the host, synchronise or allocate meanwhile); Replay(graph) runs the recording again,
  // reading whatever its tensors hold by then. Saves the per-op launch cost of small steps.
  // Backends without graphs return Unimplemented, and callers run the ops directly.
  virtual absl::Status BeginCapture() { return absl::UnimplementedError("no graph capture"); }
  // Ends the capture (also after a failed op, which it then reports) and returns the graph.
  virtual absl::StatusOr<int64_t> EndCapture() {
    return absl::UnimplementedError("no graph capture");
  }
  virtual absl::Status Replay(int64_t graph) {
    return absl::UnimplementedError("no graph capture");
  }
};

}  // namespace xserv::kernels
