// WriteKv + paged Attention against a dense reference: each sequence's unpaged K/V, an explicit
// causal / sliding-window mask, and the sink logit in the softmax denominator only (HF gpt-oss).
// With an FP8 cache, WriteKv must store exactly the host quantiser's codes and scales
// (kernels/fp8.h QuantizeFp8Group per token and kv head), and the reference attends over their
// decoded values.
//
// Every case is one mixed step over shuffled physical blocks: fresh prefills, prefill chunks on
// top of context, and single-token decodes (at and across block boundaries). Slots no sequence
// owns hold large finite garbage, so reading past a sequence's keys is caught (a masked-out
// garbage key with logit ~1e3 would swamp the softmax).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "kernels/fp8.h"
#include "tests/unit/kernels/backend_test_util.h"

namespace xserv::kernels::testing {
namespace {

struct SeqSpec {
  int context;     // KV tokens written by earlier steps
  int new_tokens;  // query rows of this step
};

// Decode steps, a fresh prefill, chunked prefills with context, and decodes that start a block
// (context 16) or fill one (context 15).
const std::vector<SeqSpec> kMixedBatch = {{0, 7}, {5, 1}, {13, 6}, {0, 1},
                                          {33, 1}, {16, 1}, {15, 1}, {2, 3}};

struct AttentionCase {
  int block_size;
  int group;  // query heads per kv head
  int head_dim;
  int window;
  bool sinks;
  bool fp8 = false;  // an FP8 E4M3 cache with (slot, kv head) scales
};

constexpr int kKvHeads = 2;
constexpr float kGarbage = 1e3f;

// A step's data on the host and the device.
struct PagedStep {
  std::vector<std::vector<float>> k, v;  // per sequence: [len, kv_heads, head_dim]
  // What the cache holds of them: k and v, or their FP8 codes and scales decoded.
  std::vector<std::vector<float>> k_cached, v_cached;
  std::vector<int32_t> block_table;      // [num_seqs, width]
  int64_t width = 0;
  KvLayer kv;
  int64_t num_slots = 0;
  std::vector<float> initial_k;  // the pool's garbage before any write (f32 and bf16 caches)
  std::vector<uint8_t> initial_k_codes;  // FP8 caches: codes and scales before any write
  std::vector<float> initial_k_scales;
};

// The host quantiser's codes [len * kv_heads * head_dim] and scales [len * kv_heads] of rows of
// kv_heads heads, and the values they decode to.
struct Fp8Quantised {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> decoded;
};
Fp8Quantised QuantiseKv(const std::vector<float>& values, int64_t head_dim) {
  // Every head is a group of one long row.
  Fp8Rows rows = QuantizeFp8Rows(values, 1, static_cast<int64_t>(values.size()), head_dim);
  Fp8Quantised q{.codes = std::move(rows.codes), .scales = std::move(rows.scales)};
  for (size_t i = 0; i < q.codes.size(); ++i) {
    q.decoded.push_back(safetensors::F8E4M3ToFloat(q.codes[i]) * q.scales[i / head_dim]);
  }
  return q;
}

template <typename T>
std::vector<T> DownloadRaw(BackendOpTest& t, const Tensor& x) {
  std::vector<T> out(x.nbytes() / sizeof(T));
  EXPECT_TRUE(t.backend().CopyToHost(x, out.data()).ok());
  return out;
}

template <typename T>
Tensor UploadRaw(BackendOpTest& t, const std::vector<T>& host, DType dtype,
                 std::initializer_list<int64_t> shape) {
  Tensor x = t.Alloc(dtype, shape);
  EXPECT_TRUE(t.backend().CopyFromHost(host.data(), x).ok());
  return x;
}

// Allocates a garbage-filled pool, assigns shuffled physical blocks, and writes every context
// token with one WriteKv call (the earlier steps).
PagedStep PrepareContext(BackendOpTest& t, const std::vector<SeqSpec>& seqs, int block_size,
                         int head_dim, bool fp8, std::mt19937& rng) {
  PagedStep step;
  const int64_t row = kKvHeads * head_dim;
  int64_t total_blocks = 0;
  for (const SeqSpec& s : seqs) {
    const int64_t blocks = (s.context + s.new_tokens + block_size - 1) / block_size;
    total_blocks += blocks;
    step.width = std::max(step.width, blocks + 1);  // one spare column, never read
  }
  const int64_t num_blocks = total_blocks + 3;  // spare blocks nobody owns
  std::vector<int32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  step.block_table.assign(seqs.size() * step.width, -1);
  size_t next = 0;
  std::vector<float> k_ctx, v_ctx;
  std::vector<int32_t> slots_ctx;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].context + seqs[s].new_tokens;
    for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b) {
      step.block_table[s * step.width + b] = physical[next++];
    }
    step.k.push_back(RandomFloats(len * row, rng));
    step.v.push_back(RandomFloats(len * row, rng));
    for (int j = 0; j < seqs[s].context; ++j) {
      k_ctx.insert(k_ctx.end(), step.k[s].begin() + j * row, step.k[s].begin() + (j + 1) * row);
      v_ctx.insert(v_ctx.end(), step.v[s].begin() + j * row, step.v[s].begin() + (j + 1) * row);
      slots_ctx.push_back(step.block_table[s * step.width + j / block_size] * block_size +
                          j % block_size);
    }
  }
  step.num_slots = num_blocks * block_size;
  std::vector<float> garbage_k = RandomFloats(step.num_slots * row, rng, -kGarbage, kGarbage);
  std::vector<float> garbage_v = RandomFloats(step.num_slots * row, rng, -kGarbage, kGarbage);
  if (fp8) {
    // Finite garbage (no NaN code) of magnitude up to 448 * 2.
    std::vector<uint8_t> codes(step.num_slots * row);
    for (uint8_t& c : codes) c = static_cast<uint8_t>((rng() % 0x7F) | ((rng() % 2) << 7));
    const std::vector<float> scales = RandomFloats(step.num_slots * kKvHeads, rng, 1.0f, 2.0f);
    step.kv.k = UploadRaw(t, codes, DType::kF8E4M3, {num_blocks, block_size, kKvHeads, head_dim});
    step.kv.v = UploadRaw(t, codes, DType::kF8E4M3, {num_blocks, block_size, kKvHeads, head_dim});
    step.kv.k_scale = t.UploadF32(scales, {num_blocks, block_size, kKvHeads});
    step.kv.v_scale = t.UploadF32(scales, {num_blocks, block_size, kKvHeads});
    step.initial_k_codes = std::move(codes);
    step.initial_k_scales = scales;
  } else {
    step.kv.k = t.Upload(garbage_k, {num_blocks, block_size, kKvHeads, head_dim});
    step.kv.v = t.Upload(garbage_v, {num_blocks, block_size, kKvHeads, head_dim});
    step.initial_k = std::move(garbage_k);
  }
  // Make the host sequences hold exactly what the device will (compute-dtype rounding).
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = seqs[s].context + seqs[s].new_tokens;
    t.Upload(step.k[s], {len, row});
    t.Upload(step.v[s], {len, row});
    step.k_cached.push_back(fp8 ? QuantiseKv(step.k[s], head_dim).decoded : step.k[s]);
    step.v_cached.push_back(fp8 ? QuantiseKv(step.v[s], head_dim).decoded : step.v[s]);
  }
  if (!slots_ctx.empty()) {
    k_ctx.clear(), v_ctx.clear();
    for (size_t s = 0; s < seqs.size(); ++s) {
      k_ctx.insert(k_ctx.end(), step.k[s].begin(), step.k[s].begin() + seqs[s].context * row);
      v_ctx.insert(v_ctx.end(), step.v[s].begin(), step.v[s].begin() + seqs[s].context * row);
    }
    const int64_t n = static_cast<int64_t>(slots_ctx.size());
    Tensor tk = t.Upload(k_ctx, {n, kKvHeads, head_dim});
    Tensor tv = t.Upload(v_ctx, {n, kKvHeads, head_dim});
    EXPECT_TRUE(t.backend().WriteKv(tk, tv, step.kv, t.UploadI32(slots_ctx, {n})).ok());
  }
  return step;
}

// Dense attention of one query row over keys [first, pos] of a sequence.
void DenseAttention(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                    int64_t kvh, int64_t head_dim, int64_t first, int64_t pos, double scale,
                    const float* sink, double* out, double* magnitude) {
  const int64_t row = kKvHeads * head_dim;
  std::vector<double> logits;
  double max = sink ? *sink : -INFINITY;
  for (int64_t j = first; j <= pos; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[j * row + kvh * head_dim + d];
    logits.push_back(dot * scale);
    max = std::max(max, logits.back());
  }
  double denom = sink ? std::exp(*sink - max) : 0.0;  // the sink only enlarges the denominator
  for (double& l : logits) denom += (l = std::exp(l - max));
  for (int64_t d = 0; d < head_dim; ++d) out[d] = magnitude[d] = 0;
  for (int64_t j = first; j <= pos; ++j) {
    const double p = logits[j - first] / denom;
    for (int64_t d = 0; d < head_dim; ++d) {
      out[d] += p * v[j * row + kvh * head_dim + d];
      magnitude[d] += p * std::abs(v[j * row + kvh * head_dim + d]);
    }
  }
}

// The slot of token j of sequence s.
int64_t SlotOf(const PagedStep& step, size_t s, int j, int block_size) {
  return step.block_table[s * step.width + j / block_size] * block_size + j % block_size;
}

void ExpectPoolHolds(BackendOpTest& t, const PagedStep& step, const std::vector<SeqSpec>& seqs,
                     const std::vector<int32_t>& seq_lens, const AttentionCase& c) {
  const int64_t row = kKvHeads * c.head_dim;
  const std::vector<float> pool_k = t.Download(step.kv.k), pool_v = t.Download(step.kv.v);
  std::vector<bool> owned(step.num_slots, false);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int j = 0; j < seq_lens[s]; ++j) {
      const int64_t slot = SlotOf(step, s, j, c.block_size);
      owned[slot] = true;
      ASSERT_TRUE(BitIdentical(std::span(pool_k).subspan(slot * row, row),
                               std::span(step.k[s]).subspan(j * row, row)))
          << "K of sequence " << s << " token " << j;
      ASSERT_TRUE(BitIdentical(std::span(pool_v).subspan(slot * row, row),
                               std::span(step.v[s]).subspan(j * row, row)))
          << "V of sequence " << s << " token " << j;
    }
  }
  for (int64_t slot = 0; slot < step.num_slots; ++slot) {
    if (owned[slot]) continue;
    ASSERT_TRUE(BitIdentical(std::span(pool_k).subspan(slot * row, row),
                             std::span(step.initial_k).subspan(slot * row, row)))
        << "slot " << slot << " belongs to no sequence but was written";
  }
}

// FP8: each written (token, kv head) holds the host quantiser's codes and scale, bit for bit.
void ExpectFp8PoolHolds(BackendOpTest& t, const PagedStep& step,
                        const std::vector<SeqSpec>& seqs, const std::vector<int32_t>& seq_lens,
                        const AttentionCase& c) {
  const int64_t row = kKvHeads * c.head_dim;
  const std::vector<uint8_t> codes_k = DownloadRaw<uint8_t>(t, step.kv.k);
  const std::vector<uint8_t> codes_v = DownloadRaw<uint8_t>(t, step.kv.v);
  const std::vector<float> scales_k = t.Download(step.kv.k_scale);
  const std::vector<float> scales_v = t.Download(step.kv.v_scale);
  std::vector<bool> owned(step.num_slots, false);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Fp8Quantised qk = QuantiseKv(step.k[s], c.head_dim);
    const Fp8Quantised qv = QuantiseKv(step.v[s], c.head_dim);
    for (int j = 0; j < seq_lens[s]; ++j) {
      const int64_t slot = SlotOf(step, s, j, c.block_size);
      owned[slot] = true;
      for (int64_t i = 0; i < row; ++i) {
        ASSERT_EQ(codes_k[slot * row + i], qk.codes[j * row + i])
            << "K code " << i << " of sequence " << s << " token " << j;
        ASSERT_EQ(codes_v[slot * row + i], qv.codes[j * row + i])
            << "V code " << i << " of sequence " << s << " token " << j;
      }
      ASSERT_TRUE(BitIdentical(std::span(scales_k).subspan(slot * kKvHeads, kKvHeads),
                               std::span(qk.scales).subspan(j * kKvHeads, kKvHeads)))
          << "K scales of sequence " << s << " token " << j;
      ASSERT_TRUE(BitIdentical(std::span(scales_v).subspan(slot * kKvHeads, kKvHeads),
                               std::span(qv.scales).subspan(j * kKvHeads, kKvHeads)))
          << "V scales of sequence " << s << " token " << j;
    }
  }
  for (int64_t slot = 0; slot < step.num_slots; ++slot) {
    if (owned[slot]) continue;
    ASSERT_TRUE(std::equal(codes_k.begin() + slot * row, codes_k.begin() + (slot + 1) * row,
                           step.initial_k_codes.begin() + slot * row))
        << "slot " << slot << " belongs to no sequence but its codes were written";
    ASSERT_TRUE(BitIdentical(std::span(scales_k).subspan(slot * kKvHeads, kKvHeads),
                             std::span(step.initial_k_scales).subspan(slot * kKvHeads, kKvHeads)))
        << "slot " << slot << " belongs to no sequence but its scales were written";
  }
}

void RunMixedStep(BackendOpTest& t, const AttentionCase& c, std::mt19937& rng,
                  const std::vector<SeqSpec>& seqs = kMixedBatch) {
  const int64_t heads = kKvHeads * c.group, dim = c.head_dim, row = kKvHeads * dim;
  PagedStep step = PrepareContext(t, seqs, c.block_size, c.head_dim, c.fp8, rng);

  // This step: q, k, v as column slices of one fused projection (strided tokens).
  const int64_t fused_width = heads * dim + 2 * row;
  std::vector<int32_t> query_start = {0}, seq_lens, slots;
  std::vector<float> fused;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < seqs[s].new_tokens; ++i) {
      const int j = seqs[s].context + i;
      // Larger q makes some softmax rows peaky, some flat.
      std::vector<float> q = RandomFloats(heads * dim, rng, -3.0f, 3.0f);
      fused.insert(fused.end(), q.begin(), q.end());
      fused.insert(fused.end(), step.k[s].begin() + j * row, step.k[s].begin() + (j + 1) * row);
      fused.insert(fused.end(), step.v[s].begin() + j * row, step.v[s].begin() + (j + 1) * row);
      slots.push_back(step.block_table[s * step.width + j / c.block_size] * c.block_size +
                      j % c.block_size);
    }
    query_start.push_back(query_start.back() + seqs[s].new_tokens);
    seq_lens.push_back(seqs[s].context + seqs[s].new_tokens);
  }
  const int64_t tokens = query_start.back();
  Tensor t_fused = t.Upload(fused, {tokens, fused_width});
  Tensor q = t_fused.SliceLast(0, heads * dim).UnflattenLast(heads, dim);
  Tensor k = t_fused.SliceLast(heads * dim, heads * dim + row).UnflattenLast(kKvHeads, dim);
  Tensor v = t_fused.SliceLast(heads * dim + row, fused_width).UnflattenLast(kKvHeads, dim);
  AttentionBatch batch{
      .query_start = t.UploadI32(query_start, {static_cast<int64_t>(seqs.size()) + 1}),
      .seq_lens = t.UploadI32(seq_lens, {static_cast<int64_t>(seqs.size())}),
      .block_tables = t.UploadI32(step.block_table, {static_cast<int64_t>(seqs.size()), step.width}),
      .slot_mapping = t.UploadI32(slots, {tokens}),
      .num_seqs = static_cast<int>(seqs.size()),
      .max_query_len = std::ranges::max(seqs, {}, &SeqSpec::new_tokens).new_tokens,
      .max_seq_len = *std::ranges::max_element(seq_lens),
      .block_size = c.block_size};
  ASSERT_TRUE(t.backend().WriteKv(k, v, step.kv, batch.slot_mapping).ok());

  // The pool now holds every token of every sequence at its slot; other slots are untouched.
  if (c.fp8) {
    ExpectFp8PoolHolds(t, step, seqs, seq_lens, c);
  } else {
    ExpectPoolHolds(t, step, seqs, seq_lens, c);
  }
  if (::testing::Test::HasFatalFailure()) return;

  std::vector<float> sinks = RandomFloats(heads, rng, -3.0f, 3.0f);
  sinks[0] = 6.0f;  // one head whose sink takes most of the probability mass
  Tensor t_sinks = t.UploadF32(sinks, {heads});
  const AttentionParams params{.scale = static_cast<float>(1.0 / std::sqrt(dim)),
                               .sliding_window = c.window,
                               .sinks = c.sinks ? &t_sinks : nullptr};
  Tensor out = t.Poisoned({tokens, heads, dim});
  ASSERT_TRUE(t.backend().Attention(q, step.kv, batch, params, out).ok());

  std::vector<double> expected(tokens * heads * dim), magnitude(tokens * heads * dim);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < seqs[s].new_tokens; ++i) {
      const int64_t tok = query_start[s] + i, pos = seqs[s].context + i;
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < heads; ++h) {
        DenseAttention(&fused[tok * fused_width + h * dim], step.k_cached[s], step.v_cached[s],
                       h / c.group,
                       dim, first, pos, params.scale, c.sinks ? &sinks[h] : nullptr,
                       &expected[(tok * heads + h) * dim], &magnitude[(tok * heads + h) * dim]);
      }
    }
  }
  // f32: the CPU op reduces in double, leaving one rounding (~6e-8 of the magnitude); 1e-5
  // leaves room for an f32 online-softmax kernel. Measured against sum_j p_j |v_j|, since the
  // output itself can cancel to ~0.
  for (double& m : magnitude) m += 1e-6;
  EXPECT_TRUE(AllWithin(t.Download(out), expected, magnitude, t.Tol({.f32 = 1e-5, .bf16 = 2e-2})));
}

TEST_P(AttentionOpTest, PagedMixedBatchMatchesDenseReference) {
  std::mt19937 rng(51);
  for (int block_size : {1, 4, 16}) {
    for (int group : {1, 2, 4}) {
      for (int head_dim : {16, 64, 128}) {
        for (int window : {0, 1, 3, 8}) {
          for (bool sinks : {false, true}) {
            const AttentionCase c{block_size, group, head_dim, window, sinks};
            SCOPED_TRACE(::testing::Message() << "block_size " << block_size << " group " << group
                                              << " head_dim " << head_dim << " window " << window
                                              << " sinks " << sinks);
            RunMixedStep(*this, c, rng);
            if (HasFailure()) return;  // one failing configuration is enough to read
          }
        }
      }
    }
  }
}

// A decode step of 520 sequences (1,040 sequence x kv-head pairs: the CUDA decode kernel's
// shallow-ring form, taken from 1,024 pairs) with contexts of 0 to 99 keys, tile-aligned and not,
// in block sizes that keep a 16-key tile in one block (16; 32, where the tile may start mid-block)
// or not (4); every seventh sequence feeds 2 to 4 new rows (up to the 16 tile rows at group 4).
TEST_P(AttentionOpTest, PagedDecodeOfManySequencesMatchesDenseReference) {
  std::vector<SeqSpec> seqs;
  for (int s = 0; s < 520; ++s) seqs.push_back({(s * 37) % 100, s % 7 == 0 ? 2 + s % 3 : 1});
  std::mt19937 rng(53);
  for (int block_size : {4, 16, 32}) {
    for (int head_dim : {64, 128}) {
      for (int window : {0, 8}) {
        for (bool fp8 : {false, true}) {
          const AttentionCase c{block_size, /*group=*/4, head_dim, window,
                                /*sinks=*/window > 0, fp8};
          SCOPED_TRACE(::testing::Message() << "block_size " << block_size << " head_dim "
                                            << head_dim << " window " << window << " fp8 " << fp8);
          RunMixedStep(*this, c, rng, seqs);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The FP8 cache over the mixed steps plus a 20-row prefill chunk and a decode over 71 keys (two
// of the CUDA-core kernel's 64-key splits): WriteKv stores the host quantiser's codes and scales,
// Attention reads their decoded values (within the non-FP8 bounds of that reference). Head sizes
// the kernels take whole (64, 128) in every layout; 32, 80 and 256 once. (The tensor-core
// kernels' FP8 paths: CudaAttention's Fp8* cases in tests/gpu.)
TEST_P(AttentionOpTest, Fp8CacheMixedBatchMatchesItsDecodedReference) {
  std::vector<SeqSpec> seqs = kMixedBatch;
  seqs.push_back({40, 20});
  seqs.push_back({70, 1});
  std::mt19937 rng(52);
  std::vector<AttentionCase> cases;
  for (int block_size : {1, 16}) {
    for (int group : {1, 4}) {
      for (int head_dim : {64, 128}) {
        for (int window : {0, 3}) {
          cases.push_back({block_size, group, head_dim, window, /*sinks=*/window > 0, true});
        }
      }
    }
  }
  for (int head_dim : {32, 80, 256}) cases.push_back({16, 4, head_dim, 0, false, true});
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "FP8 cache, block_size " << c.block_size << " group "
                                      << c.group << " head_dim " << c.head_dim << " window "
                                      << c.window);
    RunMixedStep(*this, c, rng, seqs);
    if (HasFailure()) return;
  }
}

// FP8 pools need both scale tensors, f32 [blocks, block_size, kv_heads].
TEST_P(AttentionOpTest, Fp8CacheRejectsMissingOrMisshapenScales) {
  std::vector<uint8_t> codes(4 * 4 * 1 * 8, 0x38);  // 1.0
  std::vector<float> kv_new(2 * 8, 1.0f), q_values(2 * 2 * 8, 0.25f);
  KvLayer kv{.k = UploadRaw(*this, codes, DType::kF8E4M3, {4, 4, 1, 8}),
             .v = UploadRaw(*this, codes, DType::kF8E4M3, {4, 4, 1, 8}),
             .k_scale = UploadF32(std::vector<float>(16, 1.0f), {4, 4, 1}),
             .v_scale = UploadF32(std::vector<float>(16, 1.0f), {4, 4, 1})};
  Tensor k = Upload(kv_new, {2, 1, 8}), v = Upload(kv_new, {2, 1, 8});
  ASSERT_TRUE(backend().WriteKv(k, v, kv, UploadI32({0, 15}, {2})).ok());
  const AttentionBatch batch{.query_start = UploadI32({0, 2}, {2}),
                             .seq_lens = UploadI32({5}, {1}),
                             .block_tables = UploadI32({2, 0}, {1, 2}),
                             .slot_mapping = UploadI32({11, 0}, {2}),
                             .num_seqs = 1,
                             .max_query_len = 2,
                             .max_seq_len = 5,
                             .block_size = 4};
  const Tensor q = Upload(q_values, {2, 2, 8});
  ASSERT_TRUE(backend().Attention(q, kv, batch, {}, Poisoned({2, 2, 8})).ok());
  KvLayer broken = kv;
  broken.v_scale = Tensor{};
  EXPECT_EQ(backend().WriteKv(k, v, broken, UploadI32({0, 15}, {2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend().Attention(q, broken, batch, {}, Poisoned({2, 2, 8})).code(),
            absl::StatusCode::kInvalidArgument);
  broken = kv;
  broken.k_scale = UploadF32(std::vector<float>(8, 1.0f), {2, 4, 1});  // 2 blocks, not 4
  EXPECT_EQ(backend().WriteKv(k, v, broken, UploadI32({0, 15}, {2})).code(),
            absl::StatusCode::kInvalidArgument);
}

// A valid one-sequence step (3 context + 2 new tokens, block size 4) to break one field at a time.
class AttentionArgs {
 public:
  explicit AttentionArgs(BackendOpTest& t) : t_(t) {
    std::vector<float> pool(4 * 4 * 1 * 8, 0.5f), q(2 * 2 * 8, 0.25f);
    kv_.k = t.Upload(pool, {4, 4, 1, 8});
    kv_.v = t.Upload(pool, {4, 4, 1, 8});
    q_ = t.Upload(q, {2, 2, 8}).Reshape({2, 2, 8});
    batch_ = AttentionBatch{.query_start = t.UploadI32({0, 2}, {2}),
                            .seq_lens = t.UploadI32({5}, {1}),
                            .block_tables = t.UploadI32({2, 0}, {1, 2}),
                            .slot_mapping = t.UploadI32({11, 0}, {2}),
                            .num_seqs = 1,
                            .max_query_len = 2,
                            .max_seq_len = 5,
                            .block_size = 4};
  }
  absl::Status Run(const AttentionBatch& batch, const AttentionParams& params = {}) {
    return t_.backend().Attention(q_, kv_, batch, params, t_.Poisoned({2, 2, 8}));
  }
  BackendOpTest& t_;
  KvLayer kv_;
  Tensor q_;
  AttentionBatch batch_;
};

TEST_P(AttentionOpTest, RejectsInconsistentBatches) {
  AttentionArgs args(*this);
  ASSERT_TRUE(args.Run(args.batch_).ok());
  auto expect_invalid = [&](const AttentionBatch& batch, const char* what,
                            const AttentionParams& params = {}) {
    EXPECT_EQ(args.Run(batch, params).code(), absl::StatusCode::kInvalidArgument) << what;
  };
  AttentionBatch b = args.batch_;
  b.query_start = UploadI32({0, 1}, {2});
  expect_invalid(b, "query_start ends before the last query row");
  b.query_start = UploadI32({1, 2}, {2});
  expect_invalid(b, "query_start does not start at 0");
  b = args.batch_;
  b.block_tables = UploadI32({2}, {1, 1});
  expect_invalid(b, "5 kv tokens need 2 blocks of 4, the table has 1");
  b = args.batch_;
  b.seq_lens = UploadI32({1}, {1});
  expect_invalid(b, "fewer kv tokens than queries");
  b = args.batch_;
  b.block_size = 8;
  expect_invalid(b, "batch block size differs from the cache's");
  Tensor short_sinks = UploadF32({0.0f}, {1});
  expect_invalid(args.batch_, "one sink for two heads", {.sinks = &short_sinks});
  // 3 query heads do not group over 2 kv heads.
  std::vector<float> pool(4 * 4 * 2 * 8, 0.5f), q(2 * 3 * 8, 0.25f);
  KvLayer kv2{.k = Upload(pool, {4, 4, 2, 8}), .v = Upload(pool, {4, 4, 2, 8})};
  EXPECT_FALSE(backend()
                   .Attention(Upload(q, {2, 3 * 8}).UnflattenLast(3, 8), kv2, args.batch_, {},
                              Poisoned({2, 3, 8}))
                   .ok());
}

// Table entries before a sliding window are never read, so a released one (-1) passes there and
// nowhere else: a decode row at position 4 (block size 4) with a window of 1 reads only block
// entry 1; with a window of 2 it reads key 3 in entry 0.
TEST_P(AttentionOpTest, ReleasedBlocksBeforeTheWindowAreNotRead) {
  std::vector<float> pool(4 * 4 * 1 * 8);
  std::mt19937 rng(7);
  for (float& x : pool) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const KvLayer kv{.k = Upload(pool, {4, 4, 1, 8}), .v = Upload(pool, {4, 4, 1, 8})};
  std::vector<float> q_values(8, 0.5f);
  const Tensor q = Upload(q_values, {1, 8}).UnflattenLast(1, 8);
  const auto batch = [&](std::vector<int32_t> table) {
    return AttentionBatch{.query_start = UploadI32({0, 1}, {2}),
                          .seq_lens = UploadI32({5}, {1}),
                          .block_tables = UploadI32(table, {1, 2}),
                          .slot_mapping = UploadI32({1}, {1}),
                          .num_seqs = 1,
                          .max_query_len = 1,
                          .max_seq_len = 5,
                          .block_size = 4};
  };
  const Tensor held = Poisoned({1, 1, 8}), released = Poisoned({1, 1, 8});
  ASSERT_TRUE(backend().Attention(q, kv, batch({2, 0}), {.sliding_window = 1}, held).ok());
  ASSERT_TRUE(backend().Attention(q, kv, batch({-1, 0}), {.sliding_window = 1}, released).ok());
  EXPECT_EQ(Download(held), Download(released));
  EXPECT_EQ(backend().Attention(q, kv, batch({-1, 0}), {.sliding_window = 2}, released).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend().Attention(q, kv, batch({-1, 0}), {}, released).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(AttentionOpTest, WriteKvRejectsSlotsOutsideThePool) {
  std::vector<float> pool(4 * 4 * 1 * 8, 0.5f), kv_new(2 * 8, 1.0f);
  KvLayer kv{.k = Upload(pool, {4, 4, 1, 8}), .v = Upload(pool, {4, 4, 1, 8})};
  Tensor k = Upload(kv_new, {2, 1, 8}), v = Upload(kv_new, {2, 1, 8});
  EXPECT_TRUE(backend().WriteKv(k, v, kv, UploadI32({0, 15}, {2})).ok());
  for (int32_t bad : {-1, 16, 1 << 30}) {
    const absl::Status status = backend().WriteKv(k, v, kv, UploadI32({3, bad}, {2}));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
  }
  std::vector<float> wide(2 * 2 * 8, 1.0f);  // 2 kv heads for a 1-head cache
  Tensor k2 = Upload(wide, {2, 2, 8});
  EXPECT_FALSE(backend().WriteKv(k2, k2, kv, UploadI32({0, 1}, {2})).ok());
  EXPECT_FALSE(backend().WriteKv(k, v, kv, UploadI32({0}, {1})).ok());  // one slot short
}

}  // namespace
}  // namespace xserv::kernels::testing
