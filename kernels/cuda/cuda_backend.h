// The CUDA backend: the op API (kernels/backend.h) on one NVIDIA GPU. Weights and activations are
// bf16 in device memory (compute_dtype() == kBF16), every reduction and accumulation is fp32;
// logits, router logits, RoPE tables and sinks are f32. GEMMs go to cuBLASLt (gemm.h); every
// other op is one small kernel, one op family per file set (elementwise, norm, softmax, rope,
// paged_kv, attention, moe). ops_*.cc validate arguments and launch; the .cu files compute.
//
// Ownership and threading: one CudaBackend per worker process, created at start-up and used only
// by the engine-loop thread, which must have the backend's device current (Create makes it
// current on the calling thread). Every op is queued on the one CUDA stream the backend owns, in
// call order; ops never synchronise with the host except CopyToHost and Synchronize, and never
// allocate device memory (the cuBLASLt workspace is allocated once in Create; Sample's small
// staging buffers and attention's split partials grow the first times a larger step needs them).
// Large host-to-device copies go through two pinned 32 MiB chunks (weights load at DMA speed). Buffers from
// Allocate are freed with cudaFree, which waits for the device; free them before the backend.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/fp8_gemv_mma.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/op_profiler.h"

namespace xserv::kernels::cuda {

struct NormArgs;     // norm.h
struct SiluMulRows;  // fp8_quant.h

struct CudaBackendOptions {
  int device = 0;
  // Debug / self-check mode: synchronise after every op and return the first device error with
  // the op's name, and copy device-side indices (token ids, row indices, positions, slots, expert
  // ids, attention metadata) to the host to refuse bad ones with InvalidArgument exactly like the
  // CPU backend. Without it, bad indices give NaN rows or skipped writes, never out-of-bounds
  // access. Slow; for tests and for chasing a bad step.
  bool check_each_op = false;
  // Matmuls whose rows do not depend on the batch they run in (see gemm.h): greedy outputs then
  // do not depend on which requests happened to share a step.
  bool batch_invariant = false;
  int64_t invariant_reference_rows = 256;  // see GemmOptions
  bool gemv = true;                        // see GemmOptions
  // Programmatic dependent launch (pdl.cuh): the GEMV (GemmOptions::pdl), and with
  // pdl_decode_kernels also the decode path's norms, SiluMul, fused q/k norm + RoPE, decode
  // attention, router top-k and the MXFP4 experts' GEMV form (projections, combine), may launch
  // while their predecessor runs.
  bool pdl = false;
  bool pdl_decode_kernels = false;
  bool gemm_autotune = false;              // GemmOptions::autotune
  // Prefill attention on tensor cores (flash_attention.cu) for sequences with >= 16 new rows,
  // head_dim 64 or 128; not in the batch-invariant mode (its rounding differs from the decode
  // kernel's).
  bool flash_prefill = false;
  // Decode rows on the GQA-packed tensor-core kernel (decode_attention.cu): each kv head's keys
  // read once for all its query heads; head_dim 64 or 128; not in the batch-invariant mode.
  bool decode_attention = false;
  // ... with the keys as the MMAs' M dimension (keys_as_m_tile.cuh) when a kv head has at most 8
  // query heads: half the MMAs and accumulators; sequences of more than 8 / group new rows go to
  // the CUDA-core kernel.
  bool decode_attention_keys_as_m = false;
  // ... for a bf16 cache at head_dim 128 and >= 1024 (sequence, kv head) pairs in CTAs of 3
  // warps, 4 per SM (decode_attention.cu, kFourPerSmWarps).
  bool decode_attention_four_ctas_per_sm = false;
  // ... with a sequence's kv heads adjacent in the grid, so that they read the cache's rows at
  // about the same time.
  bool decode_attention_kv_heads_first = false;
  // ... with the keys as M, for steps of at most this many (sequence, kv head) pairs (and at
  // least decode_attention_wide_min_pairs), in CTAs of 8 warps that take 512 keys before the
  // keys spread over more CTAs (attention.h, PagedAttentionArgs::decode_wide_ctas); 0: never.
  int64_t decode_attention_wide_max_pairs = 0;
  // ... and from this many pairs; -1: half the SMs. The wide form's CTAs take an SM each: with
  // fewer pairs the split over more, smaller CTAs reads faster (Qwen3-8B on an H200 at b=1:
  // 4.55 -> 4.90 ms wide, docs/benchmarks session 26). Tests set 0 to reach it with few pairs.
  int64_t decode_attention_wide_min_pairs = -1;
  // QkNormRopeWriteKv as one kernel (qk_norm_rope.cu) instead of the five separate ops.
  bool fuse_qk_norm_rope = false;
  // MatmulSiluMul at one row as one GEMV with SiluMul as its epilogue (gemv.h, GemvArgs::glu)
  // instead of the GEMV and then the SiluMul kernel; needs gemv.
  bool fuse_silu_gemv = false;
  // ExpertsAddRmsNorm with MXFP4 experts as the expert kernels and one norm kernel that forms
  // each token's combine itself (NormArgs::combine) instead of reading it from the combine
  // kernel's output: a launch and a round trip of the row fewer per MoE layer, bit-identical.
  // Hidden sizes of whole 16-byte vectors above 512 (RmsNormTakesCombine); others, and dense
  // experts, run the two ops.
  bool fuse_moe_norm = false;
  // AddRmsNormMatmul with FP8 weights at one row (the CUDA-core FP8 GEMV's decode step) as one
  // kernel whose CTAs each compute the norm while staging x (gemv.h, GemvNorm), bit-identical to
  // the norm kernel and then the GEMV; the models then pass each block's pre-norm to its first
  // projection (Backend::FusesNormIntoMatmul). bf16 weights keep the two kernels.
  bool fuse_norm_gemv = false;
  // AddRmsNormMatmul with FP8 weights on the W8A8 GEMM (fp8_w8a8, more than kGemvMaxRows rows):
  // the norm kernel also writes the FP8 codes and scales of its output (NormArgs::fp8_codes),
  // bit-identical to the quantiser, which then does not run. Also makes FusesNormIntoMatmul true.
  bool fuse_norm_quant = false;
  // GatedMlpRowFp8 as one kernel (gated_mlp_gemv.h): at one row, a gated MLP with FP8 weights
  // in 128-blocks and at least two 32-column units per SM (measured faster than the three
  // kernels on Qwen3-8B's MLP, slower on small ones: docs/benchmarks session 34), with down
  // transposed at load (WantsFp8DownTransposed: another copy of each down projection). Not in
  // the batch-invariant mode (its sums add in the order the CTAs finish).
  bool fused_mlp_row = false;
  // With fp8_w8a8, above 8 rows: SiluMulMatmulFp8's activation kernel writes the W8A8 GEMM's
  // activation codes too (fp8_quant.h LaunchSiluMulQuantizeFp8Rows), no quantiser kernel.
  bool fuse_silu_quant = false;
  // MatmulFp8 above kGemvMaxRows rows as W8A8: the activations quantised per row and 128 columns
  // (fp8_quant.h), then cuBLASLt's FP8 block-scaled GEMM (128-blocks only; other shapes and the
  // batch-invariant mode keep decoding the weight to bf16).
  bool fp8_w8a8 = false;
  // With fp8_w8a8: W8A8 GEMMs of at most this many rows (padded to 4) use the weight's
  // Fp8Weight::row_scales, which the models then make at load (WantsFp8RowScales); 0: never.
  // cuBLASLt offers one block-scaled (128 x 128) kernel for these shapes and several per-row
  // ones; on an H200 the per-row ones took Qwen3-8B's step 12-15 % faster at 16-64 rows and
  // 4 % slower at 128 (docs/benchmarks session 23).
  int fp8_w8a8_row_scales_rows = 64;
  // MatmulFp8 at fp8_gemv_mma_min_rows to kGemvMaxRows rows on tensor cores (fp8_gemv_mma.h:
  // codes to bf16 pairs, bf16 x) instead of the CUDA-core GEMV, where it applies (measured faster
  // from 2 rows: kFp8MmaGemvMinRows).
  bool fp8_gemv_mma = true;
  int fp8_gemv_mma_min_rows = kFp8MmaGemvMinRows;  // the rows from which it applies (1 to 8)
  // PrefetchAfterNextMatmul: the decode GEMV asks L2 for up to this many bytes of the hinted
  // weight as it finishes (l2_prefetch.h); 0: off. With l2_prefetch_own the hints are ignored and
  // each decode GEMV asks for that many bytes of its own weight before its PDL wait instead.
  int64_t l2_prefetch_bytes = 0;
  bool l2_prefetch_own = false;
  // Record the GPU time of every op (op_profiler.h); read with TakeOpProfile. Costs an event per op.
  bool profile_ops = false;
};

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceType device() const override { return DeviceType::kCuda; }
  std::string name() const override { return "cuda"; }
  DType compute_dtype() const override { return DType::kBF16; }
  cudaStream_t stream() const { return stream_; }
  const GemmRunner& gemm() const { return *gemm_; }

  // profile_ops: occupy the stream for `microseconds` so that the next ops queue up behind it and
  // run back to back (see OpProfiler::Hold); the per-op times since the last call, largest first.
  absl::Status HoldForProfile(int64_t microseconds);
  absl::StatusOr<std::vector<OpTime>> TakeOpProfile();

  absl::StatusOr<Buffer> Allocate(DType dtype, std::span<const int64_t> shape) override;
  using Backend::Allocate;
  absl::Status CopyFromHost(const void* src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, void* dst) override;
  absl::Status Convert(const Tensor& src, const Tensor& dst) override;
  absl::Status Synchronize() override;

  absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                         bool accumulate) override;
  absl::Status EmbeddingShard(const Tensor& table, const Tensor& ids, int64_t first_id,
                              const Tensor& out) override;
  absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                       const Tensor& out) override;
  absl::Status AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                          const Tensor& out) override;
  absl::Status LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                         const Tensor& out) override;
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out) override;

  absl::Status Matmul(const Tensor& x, const Tensor& w, const Tensor* bias,
                      const Tensor& out) override;
  absl::Status MatmulFp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias,
                         const Tensor& out) override;
  absl::Status AddRmsNormMatmul(const PreNorm& norm, const MatmulWeight& w, const Tensor* bias,
                                const Tensor& out) override;
  bool FusesNormIntoMatmul() const override {
    return options_.fuse_norm_gemv || options_.fuse_norm_quant;
  }
  bool WantsFp8RowScales() const override {
    return options_.fp8_w8a8 && !options_.batch_invariant &&
           options_.fp8_w8a8_row_scales_rows > 0;
  }
  bool Fp8MatmulAtAnyRows(int64_t n, int64_t k, int64_t block) const override;
  void PrefetchAfterNextMatmul(const Tensor& weight) override;
  absl::Status GatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) override;

  absl::Status Rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin) override;
  absl::Status QkNormRopeWriteKv(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const QkNormRope& p, const KvLayer& kv,
                                 const Tensor& slot_mapping) override;
  // With the fused kernel (fuse_qk_norm_rope) for this head size.
  bool TakesStridedQkNormRope(int64_t head_dim) const override;
  absl::Status WriteKv(const Tensor& k, const Tensor& v, const KvLayer& kv,
                       const Tensor& slot_mapping) override;
  absl::Status Attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                         const AttentionParams& params, const Tensor& out) override;

  absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  absl::Status MatmulSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                             const Tensor& out) override;
  bool WantsFp8DownTransposed(int64_t hidden, int64_t inter, int64_t block) const override;
  absl::Status GatedMlpRowFp8(const PreNorm* norm, const Tensor& normed, const Fp8Weight& gate_up,
                              const Fp8Weight& down_t, const Tensor& out) override;
  absl::Status SiluMulMatmulFp8(const Tensor& gate, const Tensor& up, const Tensor& act,
                                const Fp8Weight& w, const Tensor& out) override;
  absl::Status GeluTanh(const Tensor& x, const Tensor& out) override;

  absl::Status RouterTopK(const Tensor& logits, const Tensor& ids, const Tensor& weights) override;
  absl::Status Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                       const ExpertWeights& experts, const GluParams& glu,
                       const Tensor& out) override;
  absl::Status ExpertsAddRmsNorm(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                 const ExpertWeights& experts, const GluParams& glu,
                                 const Tensor& out, const Tensor& residual,
                                 const Tensor& norm_weight, float eps,
                                 const Tensor& normed) override;

  absl::Status LogSoftmax(const Tensor& x, const Tensor& out) override;
  absl::Status ArgMax(const Tensor& x, const Tensor& ids) override;
  absl::Status Sample(const Tensor& logits, std::span<const SampleRowSpec> rows,
                      std::span<SampleRowResult> results) override;
  absl::Status Zero(const Tensor& t) override;

  // CUDA graphs of the backend's stream (not in check_each_op or profile_ops mode, which
  // synchronise per op).
  absl::Status BeginCapture() override;
  absl::StatusOr<int64_t> EndCapture() override;
  absl::Status Replay(int64_t graph) override;

 private:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}

  // The status of a launch (its cudaGetLastError); in check_each_op mode also waits for the
  // kernel and reports its execution error under the op's name.
  absl::Status Launched(const char* op, cudaError_t launch_error);
  // The same for an op whose profile line names its weight shape ("Matmul 4096x12288") and
  // counts the weight bytes it streams (OpProfiler: GB/s per shape).
  absl::Status LaunchedWeights(const char* op, cudaError_t launch_error, int64_t n, int64_t k,
                               double weight_bytes);
  // check_each_op: waits for the stream and names `op` in a device error.
  absl::Status WaitIfChecking(const char* op);
  // The AddRmsNorm that ExpertsAddRmsNorm folds the experts' combine into.
  struct MoeNorm {
    Tensor residual, weight, normed;
    float eps = 1e-6f;
  };
  // Experts over MXFP4 or FP8 weights (moe_quantized.h), in rounds of at most 1024 tokens; with
  // `norm` the combine feeds that norm instead of `out` (the caller checked RmsNormTakesCombine).
  absl::Status ExpertsQuantized(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                const ExpertWeights& experts, const GluParams& glu,
                                const Tensor& out, const MoeNorm* norm = nullptr);
  // check_each_op: every i32 of `indices` (contiguous) must lie in [0, limit).
  absl::Status CheckIndices(const char* op, const char* what, const Tensor& indices,
                            int64_t limit);
  // Which GEMV MatmulFp8 streams `call`'s FP8 weight through (decode rows), with its arguments;
  // kNone: W8A8 or the decoded weight instead. One decision for MatmulFp8, AddRmsNormMatmul and
  // SiluMulMatmulFp8.
  struct Fp8DecodeGemv {
    enum Kernel { kNone, kCudaCores, kTensorCores } kernel = kNone;
    GemvArgs args;
  };
  Fp8DecodeGemv Fp8DecodeGemvFor(const GemmCall& call, const Fp8Weight& w) const;
  // MatmulFp8's W8A8 path (fp8_w8a8); Unimplemented when cuBLASLt refuses the shape. With
  // `norm`, whose out is call.x, that norm kernel quantises x as it writes it (instead of the
  // quantiser after it; RmsNormTakesFp8Codes must hold).
  // The activations quantised by the quantiser kernel, or by the kernel that forms them: the
  // norm (`norm`) or the MLP's SiluMul (`silu`, act = silu(gate) * up; call.x is act).
  absl::Status MatmulW8A8(const GemmCall& call, const Fp8Weight& w,
                          const NormArgs* norm = nullptr, const SiluMulRows* silu = nullptr);
  // check_each_op: the CPU backend's host-side checks of the step's attention metadata.
  absl::Status CheckAttentionMetadata(const Tensor& q, const KvLayer& kv,
                                      const AttentionBatch& batch, int sliding_window);

  // `buffer` holds at least `bytes` (reallocated, contents lost, when it does not; the old
  // allocation is retired, not freed, since a graph may use it).
  absl::Status Reserve(Buffer& buffer, size_t bytes);

  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmRunner> gemm_;
  std::unique_ptr<OpProfiler> profiler_;  // profile_ops only
  // Sample's device staging (ops_sampling.cc), grown on demand and kept: specs, adjustments with
  // the raw logits they replace, and results.
  Buffer sample_rows_, sample_adjustments_, sample_results_;
  // Attention's split partials (attention.h), grown on demand.
  Buffer attention_partials_, decode_partials_;
  // GatedMlpRowFp8's accumulator (f32 [kMlpRowMaxHidden]) and arrival counter, zeroed at
  // creation and left zero by every launch; allocated with fused_mlp_row only. 8192: the
  // kernel's x, norm weight and partial output in 64 KB of shared memory (GatedMlpGemvSupports).
  static constexpr int64_t kMlpRowMaxHidden = 8192;
  Buffer mlp_row_scratch_;
  // ArgMax's per-chunk partials (softmax.h), grown on demand.
  Buffer argmax_partials_;
  int sm_count_ = 0;  // the device's SMs: how many CTAs fill it
  // The quantised experts' scratch (moe_quantized.h): routing, activations, down outputs.
  Buffer moe_routing_, moe_act_, moe_out_;
  // MatmulFp8's bf16 copy of a weight for the GEMM path, grown on demand; the W8A8 path's
  // quantised activations, their scales, and its output when the rows are padded.
  Buffer fp8_weight_, fp8_act_, fp8_act_scales_, fp8_out_;
  // PrefetchAfterNextMatmul's hint, for the next matmul op to take (TakeL2Prefetch).
  L2Prefetch pending_l2_prefetch_;
  // A matmul op's GEMV prefetches into `call`: the pending hint (taken: it is this op's) and, with
  // l2_prefetch_own, the bytes of its own weight.
  void TakeL2Prefetch(GemmCall& call) {
    call.prefetch = std::exchange(pending_l2_prefetch_, L2Prefetch{});
    call.own_prefetch_bytes = options_.l2_prefetch_own ? options_.l2_prefetch_bytes : 0;
  }
  // Whether the W8A8 path was refused (cuBLASLt had no algorithm): logged once.
  bool fp8_w8a8_refused_ = false;
  std::vector<cudaGraphExec_t> graphs_;  // instantiated captures, by index
  std::vector<Buffer> retired_;          // scratch outgrown by Reserve, still in graphs
  // CopyFromHost of kStagedCopyBytes or more: two pinned chunks, each with the event of its last
  // DMA (allocated on the first large copy).
  static constexpr size_t kStagedCopyBytes = size_t{4} << 20;
  static constexpr size_t kStagingChunkBytes = size_t{32} << 20;
  void* staging_[2] = {nullptr, nullptr};
  cudaEvent_t staging_done_[2] = {nullptr, nullptr};
  bool capturing_ = false;
};

}  // namespace xserv::kernels::cuda
