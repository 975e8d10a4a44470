// CPU normalisation ops: RMSNorm, fused residual add + RMSNorm, LayerNorm. Row reductions are
// accumulated in double so the reference is at least as accurate as any device kernel.
#include <cmath>

#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {
namespace {

absl::Status CheckNormArgs(const char* op, const Tensor& x, const Tensor& weight,
                           const Tensor& out) {
  RETURN_IF_ERROR(ExpectDType(op, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType(op, "weight", weight, DType::kF32));
  RETURN_IF_ERROR(ExpectDType(op, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor(op, "x", x));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(op, x, out));
  RETURN_IF_ERROR(ExpectRank(op, "weight", weight, 1));
  return ExpectDim(op, "weight", weight, 0, x.dim(-1));
}

void RmsNormRow(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

}  // namespace

absl::Status CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                 const Tensor& out) {
  RETURN_IF_ERROR(CheckNormArgs("RmsNorm", x, weight, out));
  const Rows<float> in = AsRows<float>(x), dst = AsRows<float>(out);
  const float* w = weight.as<float>();
  pool_.ParallelFor(in.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) RmsNormRow(in.row(r), w, in.cols, eps, dst.row(r));
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    float eps, const Tensor& out) {
  RETURN_IF_ERROR(CheckNormArgs("AddRmsNorm", x, weight, out));
  RETURN_IF_ERROR(ExpectDType("AddRmsNorm", "residual", residual, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor("AddRmsNorm", "residual", residual));
  RETURN_IF_ERROR(ExpectSameShape("AddRmsNorm", x, residual));
  const Rows<float> in = AsRows<float>(x), res = AsRows<float>(residual), dst = AsRows<float>(out);
  const float* w = weight.as<float>();
  pool_.ParallelFor(in.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* rr = res.row(r);
      const float* xr = in.row(r);
      for (int64_t i = 0; i < in.cols; ++i) rr[i] += xr[i];
      RmsNormRow(rr, w, in.cols, eps, dst.row(r));
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   float eps, const Tensor& out) {
  RETURN_IF_ERROR(CheckNormArgs("LayerNorm", x, weight, out));
  RETURN_IF_ERROR(ExpectDType("LayerNorm", "bias", bias, DType::kF32));
  RETURN_IF_ERROR(ExpectRank("LayerNorm", "bias", bias, 1));
  RETURN_IF_ERROR(ExpectDim("LayerNorm", "bias", bias, 0, x.dim(-1)));
  const Rows<float> in = AsRows<float>(x), dst = AsRows<float>(out);
  const float* w = weight.as<float>();
  const float* b = bias.as<float>();
  pool_.ParallelFor(in.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = in.row(r);
      double sum = 0;
      for (int64_t i = 0; i < in.cols; ++i) sum += xr[i];
      const double mean = sum / in.cols;
      double var = 0;
      for (int64_t i = 0; i < in.cols; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / in.cols + eps));
      const float m = static_cast<float>(mean);
      float* o = dst.row(r);
      for (int64_t i = 0; i < in.cols; ++i) o[i] = (xr[i] - m) * inv * w[i] + b[i];
    }
  });
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cpu
