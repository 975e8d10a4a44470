// CudaBackend element-wise and row ops: validation, then one launch each (elementwise.cu,
// softmax.cu). Activations are bf16; LogSoftmax works on f32 logits.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/op_util.h"
#include "kernels/cuda/softmax.h"

namespace xserv::kernels::cuda {
namespace {

// Operands of a bf16 row op: CUDA, bf16, row-major, all of one shape.
absl::Status CheckBf16Rows(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  for (const Tensor* t : tensors) {
    RETURN_IF_ERROR(ExpectCuda(op, "operand", *t));
    RETURN_IF_ERROR(ExpectDType(op, "operand", *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectRowMajor(op, "operand", *t));
    RETURN_IF_ERROR(ExpectSameShape(op, first, *t));
  }
  return ExpectIntRange(op, "rows", AsRows(first).rows);
}

// Embedding and EmbeddingShard: a contiguous bf16 table [rows, H], contiguous i32 ids [T], bf16
// out rows [T, H].
absl::Status CheckEmbeddingArgs(const char* op, const Tensor& table, const Tensor& ids,
                                const Tensor& out) {
  RETURN_IF_ERROR(ExpectCuda(op, "table", table));
  RETURN_IF_ERROR(ExpectDType(op, "table", table, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(op, "table", table, 2));
  RETURN_IF_ERROR(ExpectContiguous(op, "table", table));
  RETURN_IF_ERROR(ExpectCuda(op, "ids", ids));
  RETURN_IF_ERROR(ExpectDType(op, "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(op, "ids", ids, 1));
  RETURN_IF_ERROR(ExpectContiguous(op, "ids", ids));
  RETURN_IF_ERROR(ExpectCuda(op, "out", out));
  RETURN_IF_ERROR(ExpectDType(op, "out", out, DType::kBF16));
  RETURN_IF_ERROR(ExpectRank(op, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(op, "out", out));
  RETURN_IF_ERROR(ExpectDim(op, "out", out, 0, ids.dim(0)));
  return ExpectDim(op, "out", out, 1, table.dim(1));
}

}  // namespace

absl::Status CudaBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                                    bool accumulate) {
  constexpr const char* kOp = "Embedding";
  RETURN_IF_ERROR(CheckEmbeddingArgs(kOp, table, ids, out));
  // Ids live on the device: out-of-range ones cannot be refused here without a sync, so the
  // kernel writes NaN rows for them instead of reading out of bounds (check mode refuses them).
  RETURN_IF_ERROR(CheckIndices(kOp, "token id", ids, table.dim(0)));
  return Launched(kOp, LaunchEmbedding(table.data, table.dim(0), ids.as<int32_t>(), AsRows(out),
                                       accumulate, /*first_id=*/0, /*shard=*/false, stream_));
}

absl::Status CudaBackend::EmbeddingShard(const Tensor& table, const Tensor& ids,
                                         int64_t first_id, const Tensor& out) {
  constexpr const char* kOp = "EmbeddingShard";
  RETURN_IF_ERROR(CheckEmbeddingArgs(kOp, table, ids, out));
  if (first_id < 0) return OpError(kOp, absl::StrCat("first id ", first_id, " is negative"));
  // Any non-negative id is valid (other ranks' ids read zeros); check mode refuses negative ones.
  RETURN_IF_ERROR(CheckIndices(kOp, "token id", ids, int64_t{1} << 31));
  return Launched(kOp, LaunchEmbedding(table.data, table.dim(0), ids.as<int32_t>(), AsRows(out),
                                       /*accumulate=*/false, first_id, /*shard=*/true, stream_));
}

absl::Status CudaBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  RETURN_IF_ERROR(CheckBf16Rows("Add", {&a, &b, &out}));
  return Launched("Add", LaunchAdd(AsRows(a), AsRows(b), AsRows(out), stream_));
}

absl::Status CudaBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  RETURN_IF_ERROR(CheckBf16Rows("SiluMul", {&gate, &up, &out}));
  return Launched("SiluMul", LaunchSiluMul(AsRows(gate), AsRows(up), AsRows(out), stream_,
                                                 options_.pdl_decode_kernels));
}

absl::Status CudaBackend::GeluTanh(const Tensor& x, const Tensor& out) {
  RETURN_IF_ERROR(CheckBf16Rows("GeluTanh", {&x, &out}));
  return Launched("GeluTanh", LaunchGeluTanh(AsRows(x), AsRows(out), stream_));
}

absl::Status CudaBackend::GatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) {
  constexpr const char* kOp = "GatherRows";
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectRank(kOp, "x", x, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  if (x.dtype != DType::kBF16 && x.dtype != DType::kF32) {
    return OpError(kOp, absl::StrCat("x must be bf16 or f32, got ", x.Describe()));
  }
  RETURN_IF_ERROR(ExpectCuda(kOp, "idx", idx));
  RETURN_IF_ERROR(ExpectDType(kOp, "idx", idx, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "idx", idx, 1));
  RETURN_IF_ERROR(ExpectCuda(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, x.dtype));
  RETURN_IF_ERROR(ExpectRank(kOp, "out", out, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 0, idx.dim(0)));
  RETURN_IF_ERROR(ExpectDim(kOp, "out", out, 1, x.dim(1)));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "idx", idx));
  RETURN_IF_ERROR(CheckIndices(kOp, "row index", idx, x.dim(0)));
  return Launched(kOp, LaunchGatherRows(AsRows(x), idx.as<int32_t>(), AsRows(out),
                                        static_cast<int>(DTypeSize(x.dtype)), stream_));
}

absl::Status CudaBackend::LogSoftmax(const Tensor& x, const Tensor& out) {
  constexpr const char* kOp = "LogSoftmax";
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectCuda(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "x", x));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(kOp, x, out));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "rows", AsRows(x).rows));
  return Launched(kOp, LaunchLogSoftmax(AsRows(x), AsRows(out), stream_));
}

absl::Status CudaBackend::ArgMax(const Tensor& x, const Tensor& ids) {
  constexpr const char* kOp = "ArgMax";
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectCuda(kOp, "ids", ids));
  RETURN_IF_ERROR(ExpectArgMaxOperands(x, ids));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "rows", AsRows(x).rows));
  const RowsView rows = AsRows(x);
  if (rows.cols > 65535 * kArgMaxChunk) {
    return OpError(kOp, absl::StrCat(rows.cols, " columns (at most ", 65535 * kArgMaxChunk, ")"));
  }
  const int64_t scratch = ArgMaxScratchBytes(rows.rows, rows.cols);
  if (scratch > 0) RETURN_IF_ERROR(Reserve(argmax_partials_, static_cast<size_t>(scratch)));
  return Launched(kOp, LaunchArgMax(rows, ids.as<int32_t>(),
                                    scratch > 0 ? argmax_partials_.view().data : nullptr,
                                    stream_));
}

}  // namespace xserv::kernels::cuda
