// CPU element-wise and row ops: embedding lookup, add, activations, gather, log-softmax.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {

namespace {

// Embedding and EmbeddingShard: row ids[t] - first_id of the table; outside the table an error,
// or zeros for a shard (another rank's token).
absl::Status EmbedRows(const char* op, const Tensor& table, const Tensor& ids, const Tensor& out,
                       bool accumulate, int64_t first_id, bool shard) {
  RETURN_IF_ERROR(ExpectDType(op, "table", table, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(op, "table", table, 2));
  RETURN_IF_ERROR(ExpectContiguous(op, "table", table));
  RETURN_IF_ERROR(ExpectDType(op, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(op, "ids", ids, 1));
  RETURN_IF_ERROR(ExpectDType(op, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(op, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  RETURN_IF_ERROR(ExpectDim(op, "out", out, 0, ids.dim(0)));
  RETURN_IF_ERROR(ExpectDim(op, "out", out, 1, table.dim(1)));
  if (first_id < 0) return OpError(op, absl::StrCat("first id ", first_id, " is negative"));
  const int32_t* id = ids.as<int32_t>();
  const int64_t vocab = table.dim(0), hidden = table.dim(1);
  for (int64_t t = 0; t < ids.dim(0); ++t) {
    if (id[t] < 0 || (!shard && id[t] - first_id >= vocab)) {
      return OpError(op, absl::StrCat("token id ", id[t], " at ", t, " outside [0, ",
                                      shard ? int64_t{1} << 31 : vocab, ")"));
    }
  }
  const Rows<float> dst = AsRows<float>(out);
  for (int64_t t = 0; t < ids.dim(0); ++t) {
    const int64_t row = id[t] - first_id;
    float* o = dst.row(t);
    if (row < 0 || row >= vocab) {
      std::fill(o, o + hidden, 0.0f);
      continue;
    }
    const float* src = table.as<float>() + row * hidden;
    if (accumulate) {
      for (int64_t i = 0; i < hidden; ++i) o[i] += src[i];
    } else {
      std::memcpy(o, src, hidden * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                                   bool accumulate) {
  return EmbedRows("Embedding", table, ids, out, accumulate, /*first_id=*/0, /*shard=*/false);
}

absl::Status CpuBackend::EmbeddingShard(const Tensor& table, const Tensor& ids, int64_t first_id,
                                        const Tensor& out) {
  return EmbedRows("EmbeddingShard", table, ids, out, /*accumulate=*/false, first_id,
                   /*shard=*/true);
}

absl::Status CpuBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* kOp = "Add";
  for (const Tensor* t : {&a, &b, &out}) {
    RETURN_IF_ERROR(ExpectDType(kOp, "operand", *t, DType::kF32));
    RETURN_IF_ERROR(ExpectRowMajor(kOp, "operand", *t));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, a, b));
  RETURN_IF_ERROR(ExpectSameShape(kOp, a, out));
  const Rows<float> ra = AsRows<float>(a), rb = AsRows<float>(b), ro = AsRows<float>(out);
  for (int64_t r = 0; r < ra.rows; ++r) {
    const float *pa = ra.row(r), *pb = rb.row(r);
    float* po = ro.row(r);
    for (int64_t i = 0; i < ra.cols; ++i) po[i] = pa[i] + pb[i];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  constexpr const char* kOp = "SiluMul";
  for (const Tensor* t : {&gate, &up, &out}) {
    RETURN_IF_ERROR(ExpectDType(kOp, "operand", *t, DType::kF32));
    RETURN_IF_ERROR(ExpectRowMajor(kOp, "operand", *t));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, gate, up));
  RETURN_IF_ERROR(ExpectSameShape(kOp, gate, out));
  const Rows<float> g = AsRows<float>(gate), u = AsRows<float>(up), o = AsRows<float>(out);
  pool_.ParallelFor(g.rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *pg = g.row(r), *pu = u.row(r);
      float* po = o.row(r);
      for (int64_t i = 0; i < g.cols; ++i) po[i] = pg[i] / (1.0f + std::exp(-pg[i])) * pu[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GeluTanh(const Tensor& x, const Tensor& out) {
  constexpr const char* kOp = "GeluTanh";
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  const Rows<float> in = AsRows<float>(x), o = AsRows<float>(out);
  const float k = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  pool_.ParallelFor(in.rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* pi = in.row(r);
      float* po = o.row(r);
      for (int64_t i = 0; i < in.cols; ++i) {
        const float v = pi[i];
        po[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) {
  constexpr const char* kOp = "GatherRows";
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "idx", idx, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "idx", idx, 1));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 0, idx.dim(0)));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 1, x.dim(1)));
  const Rows<float> in = AsRows<float>(x), o = AsRows<float>(out);
  const int32_t* id = idx.as<int32_t>();
  for (int64_t r = 0; r < idx.dim(0); ++r) {  // validate everything before writing anything
    if (id[r] < 0 || id[r] >= in.rows) {
      return OpError(kOp, absl::StrCat("row index ", id[r], " outside [0, ", in.rows, ")"));
    }
  }
  for (int64_t r = 0; r < idx.dim(0); ++r) {
    std::memcpy(o.row(r), in.row(id[r]), in.cols * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::LogSoftmax(const Tensor& x, const Tensor& out) {
  constexpr const char* kOp = "LogSoftmax";
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  const Rows<float> in = AsRows<float>(x), o = AsRows<float>(out);
  pool_.ParallelFor(in.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* pi = in.row(r);
      float* po = o.row(r);
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < in.cols; ++i) max = std::max(max, pi[i]);
      double sum = 0;
      for (int64_t i = 0; i < in.cols; ++i) sum += std::exp(static_cast<double>(pi[i]) - max);
      const float log_z = max + static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < in.cols; ++i) po[i] = pi[i] - log_z;
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::ArgMax(const Tensor& x, const Tensor& ids) {
  RETURN_IF_ERROR(ExpectArgMaxOperands(x, ids));
  const Rows<float> in = AsRows<float>(x);
  int32_t* out = ids.as<int32_t>();
  for (int64_t r = 0; r < in.rows; ++r) {
    const float* row = in.row(r);
    int64_t best = -1;
    for (int64_t i = 0; i < in.cols; ++i) {
      if (std::isnan(row[i])) continue;
      if (best < 0 || row[i] > row[best]) best = i;
    }
    out[r] = static_cast<int32_t>(best < 0 ? 0 : best);
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cpu
