// CPU Matmul: out[M, N] = x[M, K] · w[N, K]^T (+ bias), batch-invariant (cpu/gemm.h).
#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rows.h"
#include "kernels/fp8.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {

absl::Status CpuBackend::Matmul(const Tensor& x, const Tensor& w, const Tensor* bias,
                                const Tensor& out) {
  constexpr const char* kOp = "Matmul";
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "w", w, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "w", w, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "w", w));
  RETURN_IF_ERROR(ExpectDim(kOp, "w", w, 1, x.dim(1)));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 1, w.dim(0)));
  if (bias != nullptr) {
    RETURN_IF_ERROR(ExpectDType(kOp, "bias", *bias, DType::kF32));
    RETURN_IF_ERROR(ExpectRank(kOp, "bias", *bias, 1));
    RETURN_IF_ERROR(ExpectDim(kOp, "bias", *bias, 0, w.dim(0)));
  }
  const int64_t m = x.dim(0), n = w.dim(0), k = x.dim(1);
  if (m == 0 || n == 0) return absl::OkStatus();
  const Rows<float> xr = AsRows<float>(x), wr = AsRows<float>(w), o = AsRows<float>(out);
  InvariantSgemm(m, n, k, xr.data, xr.stride, wr.data, wr.stride, o.data, o.stride);
  if (bias != nullptr) {
    const float* b = bias->as<float>();
    for (int64_t r = 0; r < m; ++r) {
      float* row = o.row(r);
      for (int64_t c = 0; c < n; ++c) row[c] += b[c];
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::MatmulFp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias,
                                   const Tensor& out) {
  constexpr const char* kOp = "MatmulFp8";
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectFp8Weight(kOp, w.codes, w.scales, w.block, x.dim(1)));
  // The reference: the weights decoded exactly (kernels/fp8.h), then the f32 Matmul.
  const int64_t n = w.codes.dim(0), k = w.codes.dim(1);
  Fp8Blocks blocks;
  blocks.codes.assign(w.codes.as<uint8_t>(), w.codes.as<uint8_t>() + n * k);
  blocks.scale_inv.assign(w.scales.as<float>(), w.scales.as<float>() + w.scales.numel());
  ASSIGN_OR_RETURN(Buffer dense, Allocate(DType::kF32, {n, k}));
  DequantizeFp8Blocks(blocks, n, k, w.block, {dense.view().as<float>(), static_cast<size_t>(n * k)});
  return Matmul(x, dense.view(), bias, out);
}

}  // namespace xserv::kernels::cpu
