// CPU rotary embedding, paged KV writes and causal paged attention (GQA, sliding window, sinks;
// f32 or FP8 KV pools).
// Straightforward loops: one (query token, head) pair at a time, softmax in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/safetensors/float_convert.h"
#include "common/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/fp8.h"
#include "kernels/op_checks.h"

namespace xserv::kernels::cpu {
namespace {

// f32 pools, or FP8 codes with their f32 (slot, kv head) scales.
absl::Status CheckKv(const char* op, const KvLayer& kv) {
  return ExpectKvPools(op, kv, DType::kF32);
}

// Writes one new row (every kv head of one token) into `slot` of a pool: f32 as is, FP8 as
// codes and per-head scales.
void WriteSlot(const float* row, int64_t slot, const Tensor& pool, const Tensor& scales,
               int64_t kv_heads, int64_t dim) {
  if (pool.dtype == DType::kF32) {
    std::memcpy(pool.as<float>() + slot * kv_heads * dim, row, kv_heads * dim * sizeof(float));
    return;
  }
  for (int64_t h = 0; h < kv_heads; ++h) {
    scales.as<float>()[slot * kv_heads + h] =
        QuantizeFp8Group(std::span<const float>(row + h * dim, static_cast<size_t>(dim)),
                         pool.as<uint8_t>() + (slot * kv_heads + h) * dim);
  }
}

// The dim values of (slot, kv head) of a pool as floats: f32 read in place, FP8 decoded into
// `scratch`.
const float* ReadSlot(const Tensor& pool, const Tensor& scales, int64_t slot, int64_t kv_head,
                      int64_t kv_heads, int64_t dim, std::vector<float>& scratch) {
  const int64_t at = slot * kv_heads + kv_head;
  if (pool.dtype == DType::kF32) return pool.as<float>() + at * dim;
  scratch.resize(static_cast<size_t>(dim));
  const uint8_t* codes = pool.as<uint8_t>() + at * dim;
  const float scale = scales.as<float>()[at];
  for (int64_t d = 0; d < dim; ++d) scratch[d] = safetensors::F8E4M3ToFloat(codes[d]) * scale;
  return scratch.data();
}

}  // namespace

absl::Status CpuBackend::Rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin) {
  constexpr const char* kOp = "Rope";
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kF32));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "positions", positions, DType::kI32));
  RETURN_IF_ERROR(ExpectDim(kOp, "positions", positions, 0, x.dim(0)));
  RETURN_IF_ERROR(ExpectDType(kOp, "cos_sin", cos_sin, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "cos_sin", cos_sin, 2));
  RETURN_IF_ERROR(ExpectDim(kOp, "cos_sin", cos_sin, 1, x.dim(2)));
  const int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2), half = dim / 2;
  if (dim % 2 != 0) return OpError(kOp, "head_dim must be even");
  const int32_t* pos = positions.as<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (pos[t] < 0 || pos[t] >= cos_sin.dim(0)) {
      return OpError(kOp, absl::StrCat("position ", pos[t], " outside the table of ",
                                       cos_sin.dim(0)));
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cs = cos_sin.as<float>() + static_cast<int64_t>(pos[t]) * dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.as<float>() + t * x.stride(0) + h * x.stride(1);
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half], c = cs[i], s = cs[half + i];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::WriteKv(const Tensor& k, const Tensor& v, const KvLayer& kv,
                                 const Tensor& slot_mapping) {
  constexpr const char* kOp = "WriteKv";
  RETURN_IF_ERROR(CheckKv(kOp, kv));
  for (const Tensor* t : {&k, &v}) {
    RETURN_IF_ERROR(ExpectDType(kOp, "k/v", *t, DType::kF32));
    RETURN_IF_ERROR(ExpectTokenHeads(kOp, "k/v", *t));
    RETURN_IF_ERROR(ExpectDim(kOp, "k/v", *t, 1, kv.k.dim(2)));
    RETURN_IF_ERROR(ExpectDim(kOp, "k/v", *t, 2, kv.k.dim(3)));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, k, v));
  RETURN_IF_ERROR(ExpectDType(kOp, "slot_mapping", slot_mapping, DType::kI32));
  RETURN_IF_ERROR(ExpectDim(kOp, "slot_mapping", slot_mapping, 0, k.dim(0)));
  const int64_t num_slots = kv.k.dim(0) * kv.k.dim(1);
  const int64_t kv_heads = kv.k.dim(2), dim = kv.k.dim(3);
  const int32_t* slots = slot_mapping.as<int32_t>();
  for (int64_t t = 0; t < k.dim(0); ++t) {  // validate everything before writing anything
    if (slots[t] < 0 || slots[t] >= num_slots) {
      return OpError(kOp, absl::StrCat("slot ", slots[t], " outside the pool of ", num_slots));
    }
  }
  for (int64_t t = 0; t < k.dim(0); ++t) {
    WriteSlot(k.as<float>() + t * k.stride(0), slots[t], kv.k, kv.k_scale, kv_heads, dim);
    WriteSlot(v.as<float>() + t * v.stride(0), slots[t], kv.v, kv.v_scale, kv_heads, dim);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                                   const AttentionParams& params, const Tensor& out) {
  constexpr const char* kOp = "Attention";
  RETURN_IF_ERROR(CheckKv(kOp, kv));
  RETURN_IF_ERROR(ExpectDType(kOp, "q", q, DType::kF32));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "q", q));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kF32));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(kOp, q, out));
  RETURN_IF_ERROR(ExpectDim(kOp, "q", q, 2, kv.k.dim(3)));
  const int64_t tokens = q.dim(0), heads = q.dim(1), dim = q.dim(2);
  const int64_t kv_heads = kv.k.dim(2), block_size = kv.k.dim(1), num_blocks = kv.k.dim(0);
  if (kv_heads == 0 || heads % kv_heads != 0) {
    return OpError(kOp, absl::StrCat(heads, " query heads do not group over ", kv_heads,
                                     " kv heads"));
  }
  if (block_size != batch.block_size) return OpError(kOp, "block size differs from the batch's");
  const float* sinks = nullptr;
  if (params.sinks != nullptr) {
    RETURN_IF_ERROR(ExpectDType(kOp, "sinks", *params.sinks, DType::kF32));
    RETURN_IF_ERROR(ExpectDim(kOp, "sinks", *params.sinks, 0, heads));
    sinks = params.sinks->as<float>();
  }
  const int n = batch.num_seqs;
  if (n < 0 || batch.query_start.dtype != DType::kI32 || batch.query_start.rank != 1 ||
      batch.query_start.dim(0) < n + 1 || batch.seq_lens.dtype != DType::kI32 ||
      batch.seq_lens.rank != 1 || batch.seq_lens.dim(0) < n ||
      batch.block_tables.dtype != DType::kI32 || batch.block_tables.rank != 2 ||
      batch.block_tables.dim(0) < n || !batch.block_tables.is_contiguous()) {
    return OpError(kOp, absl::StrCat("batch metadata does not describe ", n,
                                     " sequences (i32 query_start [n+1], seq_lens [n], "
                                     "block_tables [n, width])"));
  }
  const int32_t* qs = batch.query_start.as<int32_t>();
  const int32_t* lens = batch.seq_lens.as<int32_t>();
  const int32_t* tables = batch.block_tables.as<int32_t>();
  const int64_t table_width = batch.block_tables.dim(1);
  if (batch.num_seqs < 0 || qs[0] != 0 || qs[batch.num_seqs] != tokens) {
    return OpError(kOp, "query_start does not cover the query rows");
  }
  // Validate every sequence before computing: the loop below trusts these bounds.
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t q_len = qs[s + 1] - qs[s];
    const int64_t blocks = (lens[s] + block_size - 1) / block_size;
    if (q_len < 0 || lens[s] < q_len || blocks > table_width) {
      return OpError(kOp, absl::StrCat("sequence ", s, ": ", q_len, " queries, ", lens[s],
                                       " kv tokens, block table width ", table_width));
    }
    const int32_t* table = tables + s * table_width;
    for (int64_t b = FirstReadBlock(lens[s], q_len, block_size, params.sliding_window);
         b < blocks; ++b) {
      if (table[b] < 0 || table[b] >= num_blocks) {
        return OpError(kOp, absl::StrCat("sequence ", s, ": block ", table[b],
                                         " outside the pool of ", num_blocks));
      }
    }
  }
  const int64_t group = heads / kv_heads;

  pool_.ParallelFor(static_cast<int64_t>(batch.num_seqs), 1, [&](int64_t s_begin, int64_t s_end) {
    std::vector<double> scores;
    std::vector<float> scratch;  // one decoded FP8 row
    for (int64_t s = s_begin; s < s_end; ++s) {
      const int64_t q_len = qs[s + 1] - qs[s], kv_len = lens[s];
      const int32_t* table = tables + s * table_width;
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t t = qs[s] + i;
        const int64_t pos = kv_len - q_len + i;  // causal: keys [first, pos]
        const int64_t first =
            params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
        for (int64_t h = 0; h < heads; ++h) {
          const float* qv = q.as<float>() + t * q.stride(0) + h * q.stride(1);
          const int64_t kvh = h / group;
          scores.assign(pos - first + 1, 0.0);
          double max = sinks ? sinks[h] : -std::numeric_limits<double>::infinity();
          for (int64_t j = first; j <= pos; ++j) {
            const int32_t block = table[j / block_size];  // validated above
            const float* kr = ReadSlot(kv.k, kv.k_scale, block * block_size + j % block_size,
                                       kvh, kv_heads, dim, scratch);
            double dot = 0;
            for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(qv[d]) * kr[d];
            scores[j - first] = dot * params.scale;
            max = std::max(max, scores[j - first]);
          }
          double denom = sinks ? std::exp(sinks[h] - max) : 0.0;
          for (double& sc : scores) denom += (sc = std::exp(sc - max));
          float* o = out.as<float>() + t * out.stride(0) + h * out.stride(1);
          std::vector<double> acc(dim, 0.0);
          for (int64_t j = first; j <= pos; ++j) {
            const int32_t block = table[j / block_size];
            const float* vr = ReadSlot(kv.v, kv.v_scale, block * block_size + j % block_size,
                                       kvh, kv_heads, dim, scratch);
            const double p = scores[j - first] / denom;
            for (int64_t d = 0; d < dim; ++d) acc[d] += p * vr[d];
          }
          for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<float>(acc[d]);
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cpu
