// CudaBackend position and attention ops: Rope, WriteKv, paged Attention. Validation of shapes
// and dtypes here; the step's metadata (positions, slots, block tables) lives on the device and is
// bounds-checked by the kernels (NaN rows / skipped slots), or on the host in check_each_op mode.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/op_util.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/rope.h"

namespace xserv::kernels::cuda {
namespace {

// bf16 pools, or FP8 codes with their f32 (slot, kv head) scales.
absl::Status CheckKv(const char* op, const KvLayer& kv) {
  RETURN_IF_ERROR(ExpectKvPools(op, kv, DType::kBF16));
  for (const Tensor* t : {&kv.k, &kv.v}) RETURN_IF_ERROR(ExpectCuda(op, "kv pool", *t));
  if (kv.fp8()) {
    for (const Tensor* t : {&kv.k_scale, &kv.v_scale}) {
      RETURN_IF_ERROR(ExpectCuda(op, "kv scales", *t));
    }
  }
  // The kernels read cache rows 16 bytes at a time.
  for (const Tensor* pool : {&kv.k, &kv.v}) {
    if (reinterpret_cast<uintptr_t>(pool->data) % 16 != 0) {
      return OpError(op, "KV pools must be 16-byte aligned");
    }
  }
  if (kv.fp8() && kv.k.dim(3) > kMaxHeadDim) {
    return OpError(op, absl::StrCat("FP8 cache: head_dim ", kv.k.dim(3), " above ", kMaxHeadDim));
  }
  return ExpectIntRange(op, "num_blocks", kv.k.dim(0));
}

// The scale pointers of an FP8 cache (null for bf16): what the kernels tell the formats apart by.
float* KScales(const KvLayer& kv) { return kv.fp8() ? kv.k_scale.as<float>() : nullptr; }
float* VScales(const KvLayer& kv) { return kv.fp8() ? kv.v_scale.as<float>() : nullptr; }

absl::Status CheckI32Vector(const char* op, const char* name, const Tensor& t, int64_t size) {
  RETURN_IF_ERROR(ExpectCuda(op, name, t));
  RETURN_IF_ERROR(ExpectDType(op, name, t, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(op, name, t, 1));
  RETURN_IF_ERROR(ExpectContiguous(op, name, t));
  return ExpectDim(op, name, t, 0, size);
}

}  // namespace

absl::Status CudaBackend::Rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin) {
  constexpr const char* kOp = "Rope";
  RETURN_IF_ERROR(ExpectCuda(kOp, "x", x));
  RETURN_IF_ERROR(ExpectDType(kOp, "x", x, DType::kBF16));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "x", x));
  RETURN_IF_ERROR(CheckI32Vector(kOp, "positions", positions, x.dim(0)));
  RETURN_IF_ERROR(ExpectCuda(kOp, "cos_sin", cos_sin));
  RETURN_IF_ERROR(ExpectDType(kOp, "cos_sin", cos_sin, DType::kF32));
  RETURN_IF_ERROR(ExpectRank(kOp, "cos_sin", cos_sin, 2));
  RETURN_IF_ERROR(ExpectContiguous(kOp, "cos_sin", cos_sin));
  RETURN_IF_ERROR(ExpectDim(kOp, "cos_sin", cos_sin, 1, x.dim(2)));
  if (x.dim(2) % 2 != 0) return OpError(kOp, "head_dim must be even");
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", x.dim(0)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "heads * head_dim", x.dim(1) * x.dim(2)));
  RETURN_IF_ERROR(CheckIndices(kOp, "position", positions, cos_sin.dim(0)));
  const RopeArgs args{.x = x.data,
                      .token_stride = x.stride(0),
                      .tokens = x.dim(0),
                      .heads = static_cast<int>(x.dim(1)),
                      .head_dim = static_cast<int>(x.dim(2)),
                      .positions = positions.as<int32_t>(),
                      .cos_sin = cos_sin.as<float>(),
                      .max_positions = cos_sin.dim(0)};
  return Launched(kOp, LaunchRope(args, stream_));
}

absl::Status CudaBackend::WriteKv(const Tensor& k, const Tensor& v, const KvLayer& kv,
                                  const Tensor& slot_mapping) {
  constexpr const char* kOp = "WriteKv";
  RETURN_IF_ERROR(CheckKv(kOp, kv));
  for (const Tensor* t : {&k, &v}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "k/v", *t));
    RETURN_IF_ERROR(ExpectDType(kOp, "k/v", *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectTokenHeads(kOp, "k/v", *t));
    RETURN_IF_ERROR(ExpectDim(kOp, "k/v", *t, 1, kv.k.dim(2)));
    RETURN_IF_ERROR(ExpectDim(kOp, "k/v", *t, 2, kv.k.dim(3)));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, k, v));
  RETURN_IF_ERROR(CheckI32Vector(kOp, "slot_mapping", slot_mapping, k.dim(0)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", k.dim(0)));
  RETURN_IF_ERROR(CheckIndices(kOp, "slot", slot_mapping, kv.k.dim(0) * kv.k.dim(1)));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "kv_heads * head_dim", kv.k.dim(2) * kv.k.dim(3)));
  const WriteKvArgs args{.k = k.data,
                         .v = v.data,
                         .k_token_stride = k.stride(0),
                         .v_token_stride = v.stride(0),
                         .tokens = k.dim(0),
                         .kv_heads = static_cast<int>(kv.k.dim(2)),
                         .head_dim = static_cast<int>(kv.k.dim(3)),
                         .slots = slot_mapping.as<int32_t>(),
                         .k_cache = kv.k.data,
                         .v_cache = kv.v.data,
                         .num_slots = kv.k.dim(0) * kv.k.dim(1),
                         .k_scale = KScales(kv),
                         .v_scale = VScales(kv)};
  return Launched(kOp, LaunchWriteKv(args, stream_));
}

bool CudaBackend::TakesStridedQkNormRope(int64_t head_dim) const {
  return options_.fuse_qk_norm_rope && head_dim <= INT32_MAX &&
         QkNormRopeSupports(static_cast<int>(head_dim));
}

absl::Status CudaBackend::QkNormRopeWriteKv(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const QkNormRope& p, const KvLayer& kv,
                                             const Tensor& slot_mapping) {
  constexpr const char* kOp = "QkNormRopeWriteKv";
  // Unfused, or other head sizes: the separate ops (Backend's default), which check everything
  // themselves.
  if (!options_.fuse_qk_norm_rope || q.rank != 3 ||
      !QkNormRopeSupports(static_cast<int>(q.dim(2)))) {
    return Backend::QkNormRopeWriteKv(q, k, v, p, kv, slot_mapping);
  }
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return OpError(kOp, "q_norm and k_norm come together");
  }
  if ((p.positions == nullptr) != (p.cos_sin == nullptr)) {
    return OpError(kOp, "positions and cos_sin come together");
  }
  RETURN_IF_ERROR(CheckKv(kOp, kv));
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    RETURN_IF_ERROR(ExpectCuda(kOp, name, *t));
    RETURN_IF_ERROR(ExpectDType(kOp, name, *t, DType::kBF16));
    RETURN_IF_ERROR(ExpectTokenHeads(kOp, name, *t));
  }
  RETURN_IF_ERROR(ExpectSameShape(kOp, k, v));
  RETURN_IF_ERROR(ExpectDim(kOp, "k", k, 1, kv.k.dim(2)));
  RETURN_IF_ERROR(ExpectDim(kOp, "k", k, 2, kv.k.dim(3)));
  RETURN_IF_ERROR(ExpectDim(kOp, "q", q, 0, k.dim(0)));
  RETURN_IF_ERROR(ExpectDim(kOp, "q", q, 2, k.dim(2)));
  const int64_t tokens = q.dim(0), head_dim = q.dim(2);
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", tokens));
  RETURN_IF_ERROR(ExpectIntRange(kOp, "heads", q.dim(1) + k.dim(1)));
  for (const Tensor* w : {p.q_norm, p.k_norm}) {
    if (w == nullptr) continue;
    RETURN_IF_ERROR(ExpectCuda(kOp, "norm weight", *w));
    RETURN_IF_ERROR(ExpectDType(kOp, "norm weight", *w, DType::kBF16));
    RETURN_IF_ERROR(ExpectRank(kOp, "norm weight", *w, 1));
    RETURN_IF_ERROR(ExpectDim(kOp, "norm weight", *w, 0, head_dim));
  }
  if (p.cos_sin != nullptr) {
    RETURN_IF_ERROR(CheckI32Vector(kOp, "positions", *p.positions, tokens));
    RETURN_IF_ERROR(ExpectCuda(kOp, "cos_sin", *p.cos_sin));
    RETURN_IF_ERROR(ExpectDType(kOp, "cos_sin", *p.cos_sin, DType::kF32));
    RETURN_IF_ERROR(ExpectRank(kOp, "cos_sin", *p.cos_sin, 2));
    RETURN_IF_ERROR(ExpectContiguous(kOp, "cos_sin", *p.cos_sin));
    RETURN_IF_ERROR(ExpectDim(kOp, "cos_sin", *p.cos_sin, 1, head_dim));
    RETURN_IF_ERROR(CheckIndices(kOp, "position", *p.positions, p.cos_sin->dim(0)));
  }
  RETURN_IF_ERROR(CheckI32Vector(kOp, "slot_mapping", slot_mapping, tokens));
  const int64_t num_slots = kv.k.dim(0) * kv.k.dim(1);
  RETURN_IF_ERROR(CheckIndices(kOp, "slot", slot_mapping, num_slots));
  const QkNormRopeArgs args{
      .q = q.data,
      .q_token_stride = q.stride(0),
      .k = k.data,
      .k_token_stride = k.stride(0),
      .v = v.data,
      .v_token_stride = v.stride(0),
      .tokens = tokens,
      .q_heads = static_cast<int>(q.dim(1)),
      .kv_heads = static_cast<int>(k.dim(1)),
      .head_dim = static_cast<int>(head_dim),
      .q_norm = p.q_norm != nullptr ? p.q_norm->data : nullptr,
      .k_norm = p.k_norm != nullptr ? p.k_norm->data : nullptr,
      .eps = p.eps,
      .positions = p.positions != nullptr ? p.positions->as<int32_t>() : nullptr,
      .cos_sin = p.cos_sin != nullptr ? p.cos_sin->as<float>() : nullptr,
      .max_positions = p.cos_sin != nullptr ? p.cos_sin->dim(0) : 0,
      .slots = slot_mapping.as<int32_t>(),
      .k_cache = kv.k.data,
      .v_cache = kv.v.data,
      .num_slots = num_slots,
      .k_scale = KScales(kv),
      .v_scale = VScales(kv),
      .pdl = options_.pdl_decode_kernels};
  return Launched(kOp, LaunchQkNormRopeWriteKv(args, stream_));
}

absl::Status CudaBackend::Attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                                    const AttentionParams& params, const Tensor& out) {
  constexpr const char* kOp = "Attention";
  RETURN_IF_ERROR(CheckKv(kOp, kv));
  RETURN_IF_ERROR(ExpectCuda(kOp, "q", q));
  RETURN_IF_ERROR(ExpectDType(kOp, "q", q, DType::kBF16));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "q", q));
  RETURN_IF_ERROR(ExpectCuda(kOp, "out", out));
  RETURN_IF_ERROR(ExpectDType(kOp, "out", out, DType::kBF16));
  RETURN_IF_ERROR(ExpectTokenHeads(kOp, "out", out));
  RETURN_IF_ERROR(ExpectSameShape(kOp, q, out));
  RETURN_IF_ERROR(ExpectDim(kOp, "q", q, 2, kv.k.dim(3)));
  const int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  const int64_t kv_heads = kv.k.dim(2), block_size = kv.k.dim(1);
  if (kv_heads == 0 || heads % kv_heads != 0) {
    return OpError(kOp, absl::StrCat(heads, " query heads do not group over ", kv_heads,
                                     " kv heads"));
  }
  if (block_size < 1) return OpError(kOp, "block size must be positive");
  // The kernels index cache slots (block * block_size + offset) in 32 bits.
  if (kv.k.dim(0) * block_size > INT32_MAX) {
    return OpError(kOp, absl::StrCat(kv.k.dim(0), " blocks of ", block_size,
                                     " slots exceed 2^31 cache slots"));
  }
  if (block_size != batch.block_size) return OpError(kOp, "block size differs from the batch's");
  if (head_dim > kMaxHeadDim) {
    return OpError(kOp, absl::StrCat("head_dim ", head_dim, " above the supported ", kMaxHeadDim));
  }
  if (heads > 65535) return OpError(kOp, "more than 65535 heads (grid y limit)");
  RETURN_IF_ERROR(ExpectIntRange(kOp, "tokens", tokens));
  if (tokens > 0 && batch.num_seqs < 1) return OpError(kOp, "query rows but no sequences");
  RETURN_IF_ERROR(CheckI32Vector(kOp, "query_start", batch.query_start, batch.num_seqs + 1));
  RETURN_IF_ERROR(CheckI32Vector(kOp, "seq_lens", batch.seq_lens, batch.num_seqs));
  RETURN_IF_ERROR(ExpectCuda(kOp, "block_tables", batch.block_tables));
  RETURN_IF_ERROR(ExpectDType(kOp, "block_tables", batch.block_tables, DType::kI32));
  RETURN_IF_ERROR(ExpectRank(kOp, "block_tables", batch.block_tables, 2));
  RETURN_IF_ERROR(ExpectRowMajor(kOp, "block_tables", batch.block_tables));
  if (batch.block_tables.dim(0) < batch.num_seqs) {
    return OpError(kOp, "block_tables has fewer rows than sequences");
  }
  const float* sinks = nullptr;
  if (params.sinks != nullptr) {
    RETURN_IF_ERROR(ExpectCuda(kOp, "sinks", *params.sinks));
    RETURN_IF_ERROR(ExpectDType(kOp, "sinks", *params.sinks, DType::kF32));
    RETURN_IF_ERROR(ExpectRank(kOp, "sinks", *params.sinks, 1));
    RETURN_IF_ERROR(ExpectDim(kOp, "sinks", *params.sinks, 0, heads));
    sinks = params.sinks->as<float>();
  }
  if (options_.check_each_op && tokens > 0) {
    RETURN_IF_ERROR(CheckAttentionMetadata(q, kv, batch, params.sliding_window));
  }
  PagedAttentionArgs args{.q = q.data,
                                .q_token_stride = q.stride(0),
                                .out = out.data,
                                .out_token_stride = out.stride(0),
                                .k_cache = kv.k.data,
                                .v_cache = kv.v.data,
                                .k_scale = KScales(kv),
                                .v_scale = VScales(kv),
                                .query_start = batch.query_start.as<int32_t>(),
                                .seq_lens = batch.seq_lens.as<int32_t>(),
                                .block_tables = batch.block_tables.as<int32_t>(),
                                .block_table_stride = batch.block_tables.stride(0),
                                .block_table_width = static_cast<int>(batch.block_tables.dim(1)),
                                .sinks = sinks,
                                .tokens = static_cast<int>(tokens),
                                .num_seqs = batch.num_seqs,
                                .heads = static_cast<int>(heads),
                                .kv_heads = static_cast<int>(kv_heads),
                                .head_dim = static_cast<int>(head_dim),
                                .block_size = static_cast<int>(block_size),
                                .num_blocks = static_cast<int>(kv.k.dim(0)),
                                .sliding_window = params.sliding_window,
                                .scale = params.scale};
  // Spread the splits over CTAs when the rows alone would leave most SMs idle (decode of few
  // sequences over long contexts); the result is the same bits either way (attention.cu).
  // Long prefill chunks on tensor cores: their rows leave the kernel below.
  const auto aligned = [](const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride(0) % 8 == 0;
  };
  const bool flash = options_.flash_prefill && !options_.batch_invariant &&
                     FlashPrefillSupports(static_cast<int>(head_dim)) && aligned(q) &&
                     aligned(out) && (batch.max_query_len == 0 ||
                                      batch.max_query_len >= kFlashMinQueryLen);
  if (flash) args.flash_min_query_len = kFlashMinQueryLen;
  const bool decode = options_.decode_attention && !options_.batch_invariant &&
                      DecodeAttentionSupports(static_cast<int>(head_dim), static_cast<int>(heads),
                                              static_cast<int>(kv_heads)) &&
                      aligned(q) && aligned(out) && batch.num_seqs > 0;
  if (decode) {
    // Enough CTAs for two per SM: (sequence, kv head) pairs, each split over up to 32 CTAs, but
    // no more than the longest sequence can use (min_tiles per CTA: KeyTilesOf in
    // decode_attention.cu).
    // Keys as the MMAs' M dimension when the kv head's query heads fit its 8 rows; sequences
    // with more new rows than that then go to the CUDA-core kernel.
    args.decode_keys_as_m =
        options_.decode_attention_keys_as_m && heads / kv_heads <= kDecodeKeysAsMRows;
    args.decode_max_rows = args.decode_keys_as_m ? kDecodeKeysAsMRows : kDecodeTileRows;
    args.decode_four_ctas_per_sm = options_.decode_attention_four_ctas_per_sm;
    args.decode_kv_heads_first = options_.decode_attention_kv_heads_first;
    const int64_t pairs = int64_t{batch.num_seqs} * kv_heads;
    const int64_t wide_min_pairs = options_.decode_attention_wide_min_pairs >= 0
                                       ? options_.decode_attention_wide_min_pairs
                                       : (sm_count_ + 1) / 2;
    args.decode_wide_ctas = args.decode_keys_as_m && pairs >= wide_min_pairs &&
                            pairs <= options_.decode_attention_wide_max_pairs;
    const int64_t min_tiles = DecodeMinTilesPerCta(args.decode_wide_ctas);
    // A sliding window bounds the keys of every row this kernel takes (at most decode_max_rows /
    // group new rows per sequence), whatever the context: a decode graph planned for the model's
    // whole context then still sizes a window layer's split by the window.
    int64_t keys = std::max(batch.max_seq_len, 1);
    if (params.sliding_window > 0) {
      keys = std::min<int64_t>(keys,
                               params.sliding_window + args.decode_max_rows / (heads / kv_heads));
    }
    const int64_t tiles = (keys + 15) / 16 + 1;
    // Up to kDecodeOneCtaTiles tiles one CTA takes them all (at most 3 per warp): no split to
    // merge, so no second kernel (gpt-oss's 128-key windows).
    const int64_t ctas =
        tiles <= kDecodeOneCtaTiles
            ? 1
            : std::clamp<int64_t>(
                  std::min((2 * std::max(sm_count_, 1) + pairs - 1) / pairs,
                           (tiles + min_tiles - 1) / min_tiles),
                  1, 32);
    if (ctas > 1) {
      const int64_t floats = DecodePartialFloats(batch.num_seqs, static_cast<int>(kv_heads),
                                                 static_cast<int>(head_dim), static_cast<int>(ctas));
      RETURN_IF_ERROR(Reserve(decode_partials_, static_cast<size_t>(floats) * sizeof(float)));
      args.decode_partials = static_cast<float*>(decode_partials_.view().data);
    }
    args.decode_ctas_per_head = static_cast<int>(ctas);
  }
  // Whether some sequence's rows belong to neither tensor-core kernel (only then does the
  // CUDA-core kernel run): known from the step's new-row counts, else from its longest chunk,
  // else assumed.
  const int64_t group = heads / kv_heads;
  const auto needs_paged = [&](int q_len) {
    return KernelForRows(q_len, static_cast<int>(group), args.flash_min_query_len,
                         args.decode_max_rows) == RowKernel::kPaged;
  };
  bool paged = true;
  if (batch.query_len_mask != 0) {
    paged = false;
    for (int bit = 0; bit < 32; ++bit) {
      // Bit 31 stands for 32 rows or more: all of them flash rows, or none.
      if ((batch.query_len_mask >> bit & 1u) != 0 && needs_paged(bit + 1)) paged = true;
    }
  } else if (batch.max_query_len > 0) {  // the longest chunk a decode chunk: so are all
    paged = KernelForRows(batch.max_query_len, static_cast<int>(group), 0,
                          args.decode_max_rows) != RowKernel::kDecode;
  }
  constexpr int64_t kFewCtas = 132;
  constexpr int64_t kMaxPartialRecords = int64_t{1} << 16;
  const int64_t splits = (std::max(batch.max_seq_len, 1) + kSplitKeys - 1) / kSplitKeys;
  const int64_t records = tokens * heads * splits;
  if (splits > 1 && tokens * ((heads + 3) / 4) < kFewCtas && records <= kMaxPartialRecords) {
    RETURN_IF_ERROR(Reserve(attention_partials_,
                            static_cast<size_t>(records * (head_dim + 2)) * sizeof(float)));
    args.partials = static_cast<float*>(attention_partials_.view().data);
    args.num_splits = static_cast<int>(splits);
  }
  if (paged) RETURN_IF_ERROR(Launched(kOp, LaunchPagedAttention(args, stream_)));
  if (flash) RETURN_IF_ERROR(Launched(kOp, LaunchFlashPrefill(args, stream_)));
  if (decode) {
    args.pdl = options_.pdl_decode_kernels;  // the decode kernels keep the PDL contract (pdl.cuh)
    RETURN_IF_ERROR(Launched(kOp, LaunchDecodeAttention(args, stream_)));
  }
  return absl::OkStatus();
}

}  // namespace xserv::kernels::cuda
