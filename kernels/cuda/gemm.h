// GemmRunner: bf16 GEMMs through cuBLASLt with plans cached by shape, for CudaBackend::Matmul.
//
// Ownership and threading: owned by one CudaBackend and used only from its engine-loop thread
// (the plan cache is unsynchronised). It holds the cuBLASLt handle and a workspace allocated
// once at creation, so Run never allocates device memory. A plan (descriptors + the algorithm the
// heuristic picked) is made on the first call of a shape and reused after, so steady-state calls
// do no heuristic search.
//
// Batch invariance (GemmOptions::batch_invariant): cuBLASLt's heuristic picks a different kernel
// (tile, split-K) for different m, so a row's result depends on how many other rows share the
// GEMM, i.e. on the batch the scheduler happened to form. In this mode every m of one (n, k,
// layout) family runs the same algorithm, chosen once at GemmOptions::invariant_reference_rows with split-K off,
// so each output element is reduced in the same order whatever the batch (the property greedy
// determinism under concurrency needs; cf. vLLM's batch-invariant mode, SGLang's deterministic
// inference). Costs speed where the heuristic would have chosen better per m.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kernel_types.h"

namespace xserv::kernels::cuda {

// One GEMM call in row-major terms: out[m, n] = x[m, k] · w[n, k]^T (+ bias[n]).
struct GemmCall {
  const void* x = nullptr;  // bf16, row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;  // bf16, row stride ldw
  int64_t ldw = 0;
  void* out = nullptr;      // f32 or bf16, row stride ldo
  int64_t ldo = 0;
  ElemType out_type = ElemType::kBF16;
  const void* bias = nullptr;  // [n] of bias_type, or null
  ElemType bias_type = ElemType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  // w was written by earlier work on the stream (an FP8 weight decoded into scratch): a PDL
  // launch must not read it before its wait, so the GEMV does not prefetch it (GemmOptions::pdl).
  bool w_from_stream = false;
  // For the GEMV (GemvArgs::prefetch, GemvArgs::own_prefetch_bytes); cuBLASLt ignores them.
  L2Prefetch prefetch;
  int64_t own_prefetch_bytes = 0;
};

// One W8A8 GEMM in row-major terms, on cuBLASLt's FP8 block scaling (sm_90):
// out[m, n] bf16 = (x codes * x scales) · (w codes * w scales)^T, where
//   w  E4M3 [n, k] row-major, one f32 scale per 128 x 128 block: [ceil(n / 128), k / 128]
//      row-major (the checkpoint's weight_scale_inv), k / 128 a multiple of 4;
//   x  E4M3 [m, k] contiguous, one f32 scale per row and 128 columns, stored group-major with
//      the rows contiguous (fp8_quant.h), m a multiple of 4.
struct Fp8GemmCall {
  const void* w = nullptr;
  const float* w_scales = nullptr;
  // w_scales holds one scale per row and 128 columns instead, [k / 128, n] with the rows
  // contiguous (kernels/fp8.h Fp8RowScales; cuBLASLt's VEC128 mode for A): the same values, and
  // other kernels, faster at small m on an H200 (docs/benchmarks session 23).
  bool w_row_scales = false;
  const void* x = nullptr;
  const float* x_scales = nullptr;
  void* out = nullptr;  // bf16 (f32 with out_f32: logits), row stride ldo
  int64_t ldo = 0;
  bool out_f32 = false;
  int64_t m = 0, n = 0, k = 0;
};

// The skinny GEMV's arguments for `call`'s x, w, out, bias and shape (n and k must fit int), not
// checked against what the GEMV takes: the one mapping, which the FP8 forms then give their codes
// and scales.
GemvArgs GemvArgsFrom(const GemmCall& call, bool pdl);
// GemvArgsFrom with GemvArgs::glu as given, or nothing when the GEMV does not take it (gemv.h:
// GemvSupports). For GemmRunner::Run and CudaBackend::MatmulSiluMul.
std::optional<GemvArgs> GemvArgsOf(const GemmCall& call, bool pdl, bool glu = false);

struct GemmOptions {
  bool batch_invariant = false;
  // The m at which a family's one algorithm is chosen (batch_invariant only): small favours
  // decode, large favours prefill.
  int64_t invariant_reference_rows = 256;
  // Single-row calls go to the skinny kernel (gemv.h) where it supports them; never in
  // batch-invariant mode (a row would change bits when the batch crosses the threshold). On the
  // H200 it streams Qwen3-8B's projections 4-12 % faster than cuBLASLt at one row but is
  // compute-bound from two rows on (1.2-2x slower at 4-8 rows; docs/benchmarks/README.md), so
  // only m = 1 takes it. Weights of at most kGemvSmallWeightBytes take it up to kGemvMaxRows
  // rows regardless (GemmRunner::Run says why).
  bool gemv = true;
  // GEMV launches use programmatic dependent launch (pdl.cuh): their first weight loads overlap
  // the previous kernel's tail.
  bool pdl = false;
  // Time the heuristic's top candidates (bf16: also with the other thread-block cluster shapes,
  // tiles and stage counts cuBLASLt accepts, GemmRunner::ConfigVariants) on the call's own
  // buffers the first time a shape family (n, k, layout; m by power-of-two bucket) is seen
  // outside a graph capture, and keep the fastest (cuBLASLt's first pick is a model, not a
  // measurement). Never in batch-invariant mode. The choice can differ between runs (timing
  // noise), so bits may too. RunFp8 (W8A8) times its candidates likewise, per exact shape.
  bool autotune = false;
};

class GemmRunner {
 public:
  static constexpr size_t kWorkspaceBytes = 32 << 20;

  static absl::StatusOr<std::unique_ptr<GemmRunner>> Create(const GemmOptions& options = {});
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  absl::Status Run(const GemmCall& call, cudaStream_t stream);
  // Unimplemented when cuBLASLt offers no algorithm for the call's shape (the caller takes
  // another path); remembered, so a refused shape is not asked about again.
  absl::Status RunFp8(const Fp8GemmCall& call, cudaStream_t stream);
  // Whether RunFp8 has already refused this call's shape (pointers other than out unused).
  bool Fp8Refused(const Fp8GemmCall& call) const;

  size_t num_plans() const { return plans_.size(); }

 private:
  // Everything a cuBLASLt algorithm choice depends on: shape, strides, types, epilogue and the
  // pointers' alignments (a column slice may be less aligned than a fresh allocation).
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, int, int,
                         int, int>;
  struct Plan;

  explicit GemmRunner(const GemmOptions& options);  // in the .cc, where Plan is complete
  absl::StatusOr<Plan*> GetPlan(const GemmCall& call, bool epilogue_bias, cudaStream_t stream);
  // Fills `plan`'s descriptors for `call` (m included); no algorithm yet.
  static absl::Status Describe(const GemmCall& call, bool epilogue_bias, Plan& plan);
  // The heuristic's best algorithm for `plan`'s shapes; with `no_split_k`, the best among those
  // that reduce k inside one CTA.
  absl::StatusOr<cublasLtMatmulAlgo_t> ChooseAlgo(const GemmCall& call, const Plan& plan,
                                                 bool no_split_k);
  // out = w x with `plan`'s layouts and `algo` (alpha 1, beta 0, the shared workspace).
  cublasStatus_t Launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* w,
                        const void* x, void* out, cudaStream_t stream);
  // The heuristic's candidates for `plan` on these buffers (at most `max`), best guess first.
  absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> Candidates(
      const Plan& plan, const void* w, const void* x, const void* out, bool no_split_k, int max);
  // Whether `algo` (chosen for another m of the shape family) runs `plan` within the workspace.
  bool AlgoFits(const Plan& plan, cublasLtMatmulAlgo_t algo, cublasStatus_t* status = nullptr);
  // autotune: the algorithm of `plan`'s shape family and m bucket, timed once.
  absl::StatusOr<cublasLtMatmulAlgo_t> TunedAlgo(const GemmCall& call, const Key& key,
                                                bool epilogue_bias, const Plan& plan,
                                                cudaStream_t stream);
  // autotune: the first kAutotuneClusterCandidates of `results` again with each other
  // thread-block cluster shape of kClusterShapes that cuBLASLt accepts for `plan` (gemm.cc says
  // why).
  std::vector<cublasLtMatmulHeuristicResult_t> ClusterVariants(
      const Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& results);
  // autotune: each algorithm of `results` once more with every tile, stage count and cluster
  // shape its capabilities list that cuBLASLt accepts for `plan` and `results` lack (at most
  // kAutotuneMaxConfigVariants).
  std::vector<cublasLtMatmulHeuristicResult_t> ConfigVariants(
      const Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& results);
  // autotune: the fastest of the candidates, timed on `call`'s buffers (which it overwrites).
  absl::StatusOr<cublasLtMatmulAlgo_t> TimeCandidates(const GemmCall& call, const Plan& plan,
                                                     cudaStream_t stream);
  // The index of the fastest of `results` on these buffers (out is overwritten): one timed
  // launch each within a budget, the fastest few timed again; the heuristic's first (index 0)
  // unless another beats it by kAutotuneMinGain; -1 when none could run. Not during a graph
  // capture. Each timed launch follows a read that evicts the weights from L2. Logs the
  // fastest, with `label` naming the shape.
  absl::StatusOr<int> FastestOf(const Plan& plan,
                                const std::vector<cublasLtMatmulHeuristicResult_t>& results,
                                const void* w, const void* x, void* out, cudaStream_t stream,
                                absl::string_view label);

  GemmOptions options_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* l2_flush_ = nullptr;  // autotune: read between timed launches (FastestOf)
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> invariant_algos_;  // batch_invariant: by key with m = 0
  std::map<Key, cublasLtMatmulAlgo_t> tuned_algos_;  // autotune: by key with m's bucket
  // RunFp8's plans by (m, n, k, ldo, output alignment, w_row_scales); null: cuBLASLt refused
  // the shape.
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, bool>;
  std::map<Fp8Key, std::unique_ptr<Plan>> fp8_plans_;
};

}  // namespace xserv::kernels::cuda
