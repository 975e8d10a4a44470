// Argument validation shared by backends: each check returns InvalidArgument naming the op and
// the offending tensor, so a misuse is reported instead of computing garbage.
#pragma once

#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"
#include "kernels/tensor.h"

namespace xserv::kernels {

inline absl::Status OpError(const char* op, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

inline absl::Status ExpectDType(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (t.dtype == dtype) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " must be ", std::string(DTypeName(dtype)), ", got ",
                                  t.Describe()));
}

inline absl::Status ExpectRank(const char* op, const char* name, const Tensor& t, int rank) {
  if (t.rank == rank && t.data != nullptr) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " must have rank ", rank, ", got ", t.Describe()));
}

inline absl::Status ExpectDim(const char* op, const char* name, const Tensor& t, int dim,
                              int64_t size) {
  if (t.dim(dim) == size) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " dim ", dim, " must be ", size, ", got ", t.Describe()));
}

// The tensor is a 2-D array of rows (kernels/cpu/rows.h): the last dimension is contiguous and,
// from rank 3 on, all leading dimensions flatten into one row index. A rank-2 tensor may have any
// row stride (a column slice of a wider matrix).
inline absl::Status ExpectRowMajor(const char* op, const char* name, const Tensor& t) {
  bool ok = t.rank >= 1 && t.stride(-1) == 1;
  for (int i = 0; ok && t.rank >= 3 && i + 2 < t.rank; ++i) {
    ok = t.strides[i] == t.strides[i + 1] * t.shape[i + 1];
  }
  if (ok) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " must be row-major in its trailing dims, got ",
                                  t.Describe()));
}

// [tokens, heads, head_dim] with each token's heads packed (head stride = head_dim); tokens may be
// strided (e.g. q, k, v as column slices of one fused projection).
inline absl::Status ExpectTokenHeads(const char* op, const char* name, const Tensor& t) {
  if (t.rank == 3 && t.data != nullptr && t.strides[2] == 1 && t.strides[1] == t.shape[2]) {
    return absl::OkStatus();
  }
  return OpError(op, absl::StrCat(name, " must be [tokens, heads, head_dim] with packed heads, got ",
                                  t.Describe()));
}

inline absl::Status ExpectContiguous(const char* op, const char* name, const Tensor& t) {
  if (t.is_contiguous()) return absl::OkStatus();
  return OpError(op, absl::StrCat(name, " must be contiguous, got ", t.Describe()));
}

inline absl::Status ExpectSameShape(const char* op, const Tensor& a, const Tensor& b) {
  bool same = a.rank == b.rank;
  for (int i = 0; same && i < a.rank; ++i) same = a.shape[i] == b.shape[i];
  if (same) return absl::OkStatus();
  return OpError(op, absl::StrCat("shape mismatch: ", a.Describe(), " vs ", b.Describe()));
}

// ArgMax's operands on any backend: f32 rows x [R, V] and contiguous i32 ids [R].
inline absl::Status ExpectArgMaxOperands(const Tensor& x, const Tensor& ids) {
  constexpr const char* kOp = "ArgMax";
  if (absl::Status s = ExpectDType(kOp, "x", x, DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectDType(kOp, "ids", ids, DType::kI32); !s.ok()) return s;
  if (absl::Status s = ExpectRowMajor(kOp, "x", x); !s.ok()) return s;
  if (x.rank != 2 || ids.rank != 1 || ids.dim(0) != x.dim(0) || !ids.is_contiguous()) {
    return OpError(kOp, absl::StrCat("x must be [R, V] and ids [R], got ", x.Describe(), " and ",
                                     ids.Describe()));
  }
  return absl::OkStatus();
}

// Sample's operands on any backend: f32 rows logits [R, V], one spec and one result per row, each
// spec within the documented ranges (kernels/sampling.h).
inline absl::Status ExpectSampleOperands(const Tensor& logits, std::span<const SampleRowSpec> rows,
                                         size_t num_results) {
  constexpr const char* kOp = "Sample";
  if (absl::Status s = ExpectDType(kOp, "logits", logits, DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectRowMajor(kOp, "logits", logits); !s.ok()) return s;
  if (logits.rank != 2 || static_cast<int64_t>(rows.size()) != logits.dim(0) ||
      num_results != rows.size()) {
    return OpError(kOp, absl::StrCat("logits must be [R, V] with R specs and R results, got ",
                                     logits.Describe(), ", ", rows.size(), " specs, ", num_results,
                                     " results"));
  }
  const int64_t vocab = logits.dim(1);
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRowSpec& s = rows[r];
    const int mode = static_cast<int>(s.mode);
    bool ok = mode >= 0 && mode <= 2 && s.num_logprobs <= kMaxSampleLogprobs;
    if (s.mode == SampleMode::kScore) ok = ok && s.target >= 0 && s.target < vocab;
    if (s.mode == SampleMode::kDraw) {
      ok = ok && s.temperature >= 0.0f && s.top_p > 0.0f && s.top_p <= 1.0f && s.min_p >= 0.0f &&
           s.min_p <= 1.0f && s.repetition_penalty > 0.0f;
      for (size_t i = 0; ok && i < s.adjustments.size(); ++i) {
        const int32_t t = s.adjustments[i].token;
        ok = t >= 0 && t < vocab && (i == 0 || s.adjustments[i - 1].token < t);
      }
    }
    if (!ok) return OpError(kOp, absl::StrCat("row ", r, ": spec out of range"));
  }
  return absl::OkStatus();
}

// The weight of Backend::MatmulFp8: contiguous u8 codes [N, K] (K = x's columns) and contiguous
// f32 scales [ceil(N / block), ceil(K / block)], block >= 1.
inline absl::Status ExpectFp8Weight(const char* op, const Tensor& codes, const Tensor& scales,
                                    int64_t block, int64_t k) {
  if (block < 1) return OpError(op, absl::StrCat("FP8 block size ", block, " must be positive"));
  if (absl::Status s = ExpectDType(op, "FP8 codes", codes, DType::kU8); !s.ok()) return s;
  if (absl::Status s = ExpectRank(op, "FP8 codes", codes, 2); !s.ok()) return s;
  if (absl::Status s = ExpectContiguous(op, "FP8 codes", codes); !s.ok()) return s;
  if (absl::Status s = ExpectDim(op, "FP8 codes", codes, 1, k); !s.ok()) return s;
  if (absl::Status s = ExpectDType(op, "FP8 scales", scales, DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectRank(op, "FP8 scales", scales, 2); !s.ok()) return s;
  if (absl::Status s = ExpectContiguous(op, "FP8 scales", scales); !s.ok()) return s;
  const int64_t rows = (codes.dim(0) + block - 1) / block, cols = (k + block - 1) / block;
  if (absl::Status s = ExpectDim(op, "FP8 scales", scales, 0, rows); !s.ok()) return s;
  return ExpectDim(op, "FP8 scales", scales, 1, cols);
}

// One layer's paged KV pools (KvLayer): contiguous K and V of one shape [blocks, block_size,
// kv_heads, head_dim], in `dtype` (the backend's compute dtype) or as FP8 codes, then with
// contiguous f32 scales [blocks, block_size, kv_heads] for each.
inline absl::Status ExpectKvPools(const char* op, const KvLayer& kv, DType dtype) {
  if (kv.fp8()) dtype = DType::kF8E4M3;
  if (absl::Status s = ExpectDType(op, "kv.k", kv.k, dtype); !s.ok()) return s;
  if (absl::Status s = ExpectDType(op, "kv.v", kv.v, dtype); !s.ok()) return s;
  if (absl::Status s = ExpectRank(op, "kv.k", kv.k, 4); !s.ok()) return s;
  if (absl::Status s = ExpectContiguous(op, "kv.k", kv.k); !s.ok()) return s;
  if (absl::Status s = ExpectContiguous(op, "kv.v", kv.v); !s.ok()) return s;
  if (absl::Status s = ExpectSameShape(op, kv.k, kv.v); !s.ok()) return s;
  if (!kv.fp8()) return absl::OkStatus();
  for (const Tensor* scales : {&kv.k_scale, &kv.v_scale}) {
    if (absl::Status s = ExpectDType(op, "kv scales", *scales, DType::kF32); !s.ok()) return s;
    if (absl::Status s = ExpectRank(op, "kv scales", *scales, 3); !s.ok()) return s;
    if (absl::Status s = ExpectContiguous(op, "kv scales", *scales); !s.ok()) return s;
    for (int i = 0; i < 3; ++i) {
      if (absl::Status s = ExpectDim(op, "kv scales", *scales, i, kv.k.dim(i)); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels
