// CPU mixture-of-experts: router top-k with softmax over the selected logits, and sparse expert
// compute (only the selected experts run; tokens are grouped per expert, batch-invariant GEMMs).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rows.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {

absl::Status CpuBackend::RouterTopK(const Tensor& logits, const Tensor& ids,
                                    const Tensor& weights) {
  constexpr const char* kOp = "RouterTopK";
  RETURN_IF_ERROR(ExpectDType(kOp, "logits", logits, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "logits", logits, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "logits", logits));
  RETURN_IF_ERROR(ExpectDType(kOp, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "ids", ids, 2));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectDType(kOp, "weights", weights, DType::kF32));
  RETURN_IF_ERROR(ExpectSameShape(kOp, ids, weights));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "weights", weights));
  RETURN_IF_ERROR(ExpectDim(kOp, "ids", ids, 0, logits.dim(0)));
  const int64_t experts = logits.dim(1), k = ids.dim(1);
  if (k < 1 || k > experts) {
    return OpError(kOp, absl::StrCat("top-k ", k, " with ", experts, " experts"));
  }
  const Rows<float> lr = AsRows<float>(logits);
  std::vector<int32_t> order(experts);
  for (int64_t t = 0; t < lr.rows; ++t) {
    const float* l = lr.row(t);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    int32_t* id = ids.as<int32_t>() + t * k;
    float* w = weights.as<float>() + t * k;
    const double max = l[order[0]];
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(l[order[j]] - max);
    for (int64_t j = 0; j < k; ++j) {
      id[j] = order[j];
      w[j] = static_cast<float>(std::exp(l[order[j]] - max) / sum);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                 const ExpertWeights& experts, const GluParams& glu,
                                 const Tensor& out) {
  constexpr const char* kOp = "Experts";
  if (experts.format != ExpertWeights::Format::kDense) {
    return OpError(kOp, "the CPU backend takes dense experts (dequantise MXFP4 at load)");
  }
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDType(kOp, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectDType(kOp, "weights", weights, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "ids", ids, 2));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectDim(kOp, "ids", ids, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectSameShape(kOp, ids, weights));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "weights", weights));
  const Tensor& gu = experts.gate_up;
  const Tensor& dn = experts.down;
  RETURN_IF_ERROR(ExpectRank(kOp, "gate_up", gu, 3));
  RETURN_IF_ERROR(ExpectRank(kOp, "down", dn, 3));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "gate_up", gu));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "down", dn));
  const int64_t num_experts = gu.dim(0), two_i = gu.dim(1), hidden = x.dim(1);
  const int64_t inter = two_i / 2;
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up", gu, 2, hidden));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 1, hidden));
  RETURN_IF_ERROR(ExpectDim(kOp, "down", dn, 2, inter));
  RETURN_IF_ERROR(ExpectRank(kOp, "gate_up_bias", experts.gate_up_bias, 2));
  RETURN_IF_ERROR(ExpectRank(kOp, "down_bias", experts.down_bias, 2));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "gate_up_bias", experts.gate_up_bias, 1, two_i));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 0, num_experts));
  RETURN_IF_ERROR(ExpectDim(kOp, "down_bias", experts.down_bias, 1, hidden));

  const int64_t tokens = x.dim(0), k = ids.dim(1);
  const int32_t* id = ids.as<int32_t>();
  const float* wt = weights.as<float>();
  // Group (token, slot) pairs by expert, in token order.
  std::vector<std::vector<int64_t>> routed(num_experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = id[t * k + j];
      if (e < 0 || e >= num_experts) {
        return OpError(kOp, absl::StrCat("expert id ", e, " outside [0, ", num_experts, ")"));
      }
      routed[e].push_back(t * k + j);
    }
  }
  const Rows<float> xr = AsRows<float>(x), o = AsRows<float>(out);
  for (int64_t t = 0; t < tokens; ++t) std::memset(o.row(t), 0, hidden * sizeof(float));
  std::vector<float> in, h, act, y;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t n = static_cast<int64_t>(routed[e].size());
    if (n == 0) continue;
    in.resize(n * hidden);
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(&in[r * hidden], xr.row(routed[e][r] / k), hidden * sizeof(float));
    }
    h.resize(n * two_i);
    InvariantSgemm(n, two_i, hidden, in.data(), hidden, gu.as<float>() + e * two_i * hidden,
                   hidden, h.data(), two_i);
    const float* gub = experts.gate_up_bias.as<float>() + e * two_i;
    act.resize(n * inter);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const float g = std::min(h[r * two_i + 2 * i] + gub[2 * i], glu.limit);
        const float u =
            std::clamp(h[r * two_i + 2 * i + 1] + gub[2 * i + 1], -glu.limit, glu.limit);
        act[r * inter + i] = (u + 1.0f) * (g / (1.0f + std::exp(-glu.alpha * g)));
      }
    }
    y.resize(n * hidden);
    InvariantSgemm(n, hidden, inter, act.data(), inter, dn.as<float>() + e * hidden * inter, inter,
                   y.data(), hidden);
    const float* db = experts.down_bias.as<float>() + e * hidden;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t pair = routed[e][r];
      const float w = wt[pair];
      float* dst = o.row(pair / k);
      for (int64_t c = 0; c < hidden; ++c) dst[c] += w * (y[r * hidden + c] + db[c]);
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cpu
