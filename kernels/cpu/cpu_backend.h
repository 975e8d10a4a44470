// The CPU backend: fp32 reference implementation of the op API (kernels/backend.h), used as the
// numeric oracle for the CUDA backend, by CI and by the demo. Weights and activations are f32;
// GEMMs go to OpenBLAS, everything else to plain loops over a small thread pool.
//
// Owned by the worker (one per process); every method is called from the engine-loop thread only.
// Results do not depend on the thread count or on which other rows share a batch: each output
// element is reduced in a fixed order (tested), so batching never changes greedy tokens.
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace xserv::kernels::cpu {

struct CpuBackendOptions {
  int num_threads = 1;  // pool threads for non-GEMM ops (and OpenBLAS, set process-wide)
  // FusesNormIntoMatmul: the models take the fused pre-norm path (here AddRmsNormMatmul's
  // default ops), so that CPU tests cover it. Same results.
  bool fuse_norm_matmul = false;
};

// Not final: tests record the calls a model makes (tests/unit/model/prefetch_hints_test.cc).
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  DeviceType device() const override { return DeviceType::kCpu; }
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }
  bool FusesNormIntoMatmul() const override { return fuse_norm_matmul_; }

  absl::StatusOr<Buffer> Allocate(DType dtype, std::span<const int64_t> shape) override;
  using Backend::Allocate;
  absl::Status CopyFromHost(const void* src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, void* dst) override;
  absl::Status Convert(const Tensor& src, const Tensor& dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

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
  absl::Status GatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) override;

  absl::Status Rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin) override;
  absl::Status WriteKv(const Tensor& k, const Tensor& v, const KvLayer& kv,
                       const Tensor& slot_mapping) override;
  // The default's per-head norms cost nothing a GPU launch would: models stack q, k and v.
  bool TakesStridedQkNormRope(int64_t /*head_dim*/) const override { return true; }
  absl::Status Attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                         const AttentionParams& params, const Tensor& out) override;

  absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  absl::Status GeluTanh(const Tensor& x, const Tensor& out) override;

  absl::Status RouterTopK(const Tensor& logits, const Tensor& ids, const Tensor& weights) override;
  absl::Status Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                       const ExpertWeights& experts, const GluParams& glu,
                       const Tensor& out) override;

  absl::Status LogSoftmax(const Tensor& x, const Tensor& out) override;
  absl::Status ArgMax(const Tensor& x, const Tensor& ids) override;
  absl::Status Sample(const Tensor& logits, std::span<const SampleRowSpec> rows,
                      std::span<SampleRowResult> results) override;
  absl::Status Zero(const Tensor& t) override;

 private:
  ThreadPool pool_;
  bool fuse_norm_matmul_ = false;
};

}  // namespace xserv::kernels::cpu
