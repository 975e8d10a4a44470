// Paged KV write and attention on the CUDA backend against the CPU backend: random paged layouts
// (shuffled physical blocks), mixed batches of prefill chunks with context and decode rows, GQA,
// sliding windows, sinks, several head dims and block sizes, q as a strided column slice; bf16
// and FP8 caches.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/fp8.h"
#include "tests/gpu/cuda_test_util.h"

namespace xserv::kernels::cuda::testing {
namespace {

struct SeqSpec {
  int context;  // tokens already cached before this step
  int queries;  // new tokens this step
};

// A large decode batch: 130 sequences, so >= 1024 (sequence, kv head) pairs at 8 kv heads (the
// decode kernel's shallow ring), of 1 new row but every 16th of 2, over contexts up to 700.
std::vector<SeqSpec> LargeDecodeBatch() {
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 130; ++i) seqs.push_back({(i * 53) % 701, i % 16 == 5 ? 2 : 1});
  return seqs;
}

struct AttnCase {
  std::string name;
  int heads, kv_heads, head_dim, block_size, window;
  bool sinks;
  std::vector<SeqSpec> seqs;
  bool fp8 = false;  // an FP8 cache (codes + (slot, kv head) scales) on both backends
};

class CudaAttention : public CudaVsCpuTest, public ::testing::WithParamInterface<AttnCase> {
 protected:
  void SetUp() override { CudaVsCpuTest::SetUp(); }
  void TearDown() override { CudaVsCpuTest::TearDown(); }
};

TEST_P(CudaAttention, MatchesCpu) {
  const AttnCase& c = GetParam();
  std::mt19937 rng(1234);
  const int num_seqs = static_cast<int>(c.seqs.size());
  int blocks_needed = 0, max_blocks = 0, total_tokens = 0, q_tokens = 0;
  for (const SeqSpec& s : c.seqs) {
    const int b = (s.context + s.queries + c.block_size - 1) / c.block_size;
    blocks_needed += b;
    max_blocks = std::max(max_blocks, b);
    total_tokens += s.context + s.queries;
    q_tokens += s.queries;
  }
  const int num_blocks = blocks_needed + 5;
  const int width = max_blocks + 1;
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);

  // Block tables, slots of every cached token, query rows.
  std::vector<int32_t> tables(num_seqs * width, 0), slots, query_start{0}, seq_lens;
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int len = c.seqs[s].context + c.seqs[s].queries;
    for (int b = 0; b * c.block_size < len; ++b) tables[s * width + b] = pool[next++];
    for (int p = 0; p < len; ++p) {
      slots.push_back(tables[s * width + p / c.block_size] * c.block_size + p % c.block_size);
    }
    query_start.push_back(query_start.back() + c.seqs[s].queries);
    seq_lens.push_back(len);
  }

  const int64_t hd = c.head_dim, kvh = c.kv_heads, h = c.heads;
  // Zeroed pools, so unwritten slots are finite on both sides (the poison is for outputs).
  const int64_t pool_elems = num_blocks * c.block_size * kvh * hd;
  const Twin k_pool = Upload(std::vector<float>(pool_elems, 0.0f),
                             {num_blocks, c.block_size, kvh, hd});
  const Twin v_pool = Upload(std::vector<float>(pool_elems, 0.0f),
                             {num_blocks, c.block_size, kvh, hd});
  KvLayer kv_cpu{k_pool.cpu, v_pool.cpu}, kv_cuda{k_pool.cuda, v_pool.cuda};
  if (c.fp8) {  // codes and scales, zeroed by Allocate on both backends
    const std::vector<int64_t> codes{num_blocks, c.block_size, kvh, hd};
    const std::vector<int64_t> scales{num_blocks, c.block_size, kvh};
    for (auto& [b, kv] : {std::pair<Backend*, KvLayer*>{&cpu(), &kv_cpu},
                          std::pair<Backend*, KvLayer*>{&cuda(), &kv_cuda}}) {
      *kv = KvLayer{.k = Keep(b->Allocate(DType::kF8E4M3, codes)),
                    .v = Keep(b->Allocate(DType::kF8E4M3, codes)),
                    .k_scale = Keep(b->Allocate(DType::kF32, scales)),
                    .v_scale = Keep(b->Allocate(DType::kF32, scales))};
    }
  }

  // Keys and values of every token, written through WriteKv (one call, strided like q/k/v slices
  // of a fused projection: [T, 2 * kv * hd]).
  const Twin kv_new = Upload(RandomBf16(total_tokens * 2 * kvh * hd, rng), {total_tokens,
                                                                             2 * kvh * hd});
  const Twin k_new{kv_new.cpu.SliceLast(0, kvh * hd).UnflattenLast(kvh, hd),
                   kv_new.cuda.SliceLast(0, kvh * hd).UnflattenLast(kvh, hd)};
  const Twin v_new{kv_new.cpu.SliceLast(kvh * hd, 2 * kvh * hd).UnflattenLast(kvh, hd),
                   kv_new.cuda.SliceLast(kvh * hd, 2 * kvh * hd).UnflattenLast(kvh, hd)};
  const Twin slot_t = UploadI32(slots, {total_tokens});
  ASSERT_TRUE(cpu().WriteKv(k_new.cpu, v_new.cpu, kv_cpu, slot_t.cpu).ok());
  const absl::Status write = cuda().WriteKv(k_new.cuda, v_new.cuda, kv_cuda, slot_t.cuda);
  ASSERT_TRUE(write.ok()) << write;
  if (c.fp8) {  // the same codes and scales, byte for byte
    const auto bytes = [](Backend& b, const Tensor& t) {
      std::vector<uint8_t> out(t.nbytes());
      EXPECT_TRUE(b.CopyToHost(t, out.data()).ok());
      return out;
    };
    EXPECT_EQ(bytes(cpu(), kv_cpu.k), bytes(cuda(), kv_cuda.k));
    EXPECT_EQ(bytes(cpu(), kv_cpu.v), bytes(cuda(), kv_cuda.v));
    EXPECT_EQ(bytes(cpu(), kv_cpu.k_scale), bytes(cuda(), kv_cuda.k_scale));
    EXPECT_EQ(bytes(cpu(), kv_cpu.v_scale), bytes(cuda(), kv_cuda.v_scale));
  } else {
    EXPECT_EQ(Error(k_pool), 0.0);
    EXPECT_EQ(Error(v_pool), 0.0);
  }

  // Queries: a column slice of [q_tokens, (h + 1) * hd], scaled up so softmax is not flat.
  const Twin q_buf = Upload(RandomBf16(q_tokens * (h + 1) * hd, rng, -3, 3),
                            {q_tokens, (h + 1) * hd});
  const Twin q{q_buf.cpu.SliceLast(hd, (h + 1) * hd).UnflattenLast(h, hd),
               q_buf.cuda.SliceLast(hd, (h + 1) * hd).UnflattenLast(h, hd)};
  const Twin out = Poisoned({q_tokens, h, hd});
  const Twin qs_t = UploadI32(query_start, {num_seqs + 1});
  const Twin lens_t = UploadI32(seq_lens, {num_seqs});
  const Twin tables_t = UploadI32(tables, {num_seqs, width});
  const Twin sinks = Upload(RandomBf16(h, rng, -1, 3), {h}, DType::kF32);
  auto batch_of = [&](bool dev) {
    AttentionBatch b;
    b.query_start = dev ? qs_t.cuda : qs_t.cpu;
    b.seq_lens = dev ? lens_t.cuda : lens_t.cpu;
    b.block_tables = dev ? tables_t.cuda : tables_t.cpu;
    b.num_seqs = num_seqs;
    b.block_size = c.block_size;
    b.max_seq_len = *std::max_element(seq_lens.begin(), seq_lens.end());
    return b;
  };
  AttentionParams p_cpu{.scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                        .sliding_window = c.window,
                        .sinks = c.sinks ? &sinks.cpu : nullptr};
  AttentionParams p_cuda = p_cpu;
  p_cuda.sinks = c.sinks ? &sinks.cuda : nullptr;
  ASSERT_TRUE(cpu().Attention(q.cpu, kv_cpu, batch_of(false), p_cpu, out.cpu).ok());
  const absl::Status attn = cuda().Attention(q.cuda, kv_cuda, batch_of(true), p_cuda, out.cuda);
  ASSERT_TRUE(attn.ok()) << attn;
  EXPECT_LE(Error(out), kBf16OutTol);

  // Deterministic: a second run is bitwise identical.
  const std::vector<float> first = DownloadCuda(out.cuda);
  ASSERT_TRUE(cuda().Attention(q.cuda, kv_cuda, batch_of(true), p_cuda, out.cuda).ok());
  const std::vector<float> second = DownloadCuda(out.cuda);
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);

  // The same step with the tensor-core kernels, each from a second backend on the same device:
  // sequences of >= 16 new rows on the prefill kernel, sequences of at most 16 (new rows x query
  // heads per kv head) on the GQA-packed decode kernel (head_dim 64 and 128; others keep the
  // CUDA-core kernel). With max_query_len known, a step of decode rows only skips the CUDA-core
  // kernel altogether.
  ASSERT_TRUE(cuda().Synchronize().ok());  // inputs written on the first backend's stream
  const int max_query_len =
      std::max_element(c.seqs.begin(), c.seqs.end(), [](const SeqSpec& x, const SeqSpec& y) {
        return x.queries < y.queries;
      })->queries;
  for (const auto& [name, options] :
       {std::pair{"flash", CudaBackendOptions{.device = 0, .check_each_op = true,
                                              .flash_prefill = true}},
        std::pair{"decode", CudaBackendOptions{.device = 0, .check_each_op = true,
                                               .decode_attention = true}},
        // ... with a sequence's kv heads adjacent in the decode kernel's grid.
        std::pair{"both, kv heads first",
                  CudaBackendOptions{.device = 0, .check_each_op = true, .flash_prefill = true,
                                     .decode_attention = true,
                                     .decode_attention_kv_heads_first = true}},
        // Keys as M: sequences of at most 8 (new rows x group) on it, the rest on the others.
        std::pair{"keys as M", CudaBackendOptions{.device = 0, .check_each_op = true,
                                                  .decode_attention = true,
                                                  .decode_attention_keys_as_m = true}},
        std::pair{"both, keys as M",
                  CudaBackendOptions{.device = 0, .check_each_op = true, .flash_prefill = true,
                                     .decode_attention = true,
                                     .decode_attention_keys_as_m = true}},
        // ... in CTAs of 3 warps where a bf16 batch takes the shallow ring at head_dim 128, a
        // sequence's kv heads adjacent in the grid (the worker's default).
        std::pair{"keys as M, four CTAs per SM, kv heads first",
                  CudaBackendOptions{.device = 0, .check_each_op = true,
                                     .decode_attention = true,
                                     .decode_attention_keys_as_m = true,
                                     .decode_attention_four_ctas_per_sm = true,
                                     .decode_attention_kv_heads_first = true}},
        // ... in CTAs of 8 warps of at least 512 keys each, whatever the step's size.
        std::pair{"keys as M, wide CTAs, kv heads first",
                  CudaBackendOptions{.device = 0, .check_each_op = true,
                                     .decode_attention = true,
                                     .decode_attention_keys_as_m = true,
                                     .decode_attention_kv_heads_first = true,
                                     .decode_attention_wide_max_pairs = 1 << 20,
                                     .decode_attention_wide_min_pairs = 0}}}) {
    // What the step tells the backend: nothing, its longest chunk, or every chunk length (the
    // batch builder's mask): the kernels it may skip follow from those.
    uint32_t mask = 0;
    for (const SeqSpec& q : c.seqs) mask |= 1u << std::min(q.queries - 1, 31);
    for (const auto& [known_max, known_mask] :
         {std::pair{0, 0u}, std::pair{max_query_len, 0u}, std::pair{max_query_len, mask}}) {
      SCOPED_TRACE(absl::StrCat(name, " max_query_len ", known_max, " mask ", known_mask));
      auto variant = CudaBackend::Create(options);
      ASSERT_TRUE(variant.ok()) << variant.status();
      const Twin out_variant = Poisoned({q_tokens, h, hd});
      AttentionBatch b = batch_of(true);
      b.max_query_len = known_max;
      b.query_len_mask = known_mask;
      const absl::Status run = (*variant)->Attention(q.cuda, kv_cuda, b, p_cuda, out_variant.cuda);
      ASSERT_TRUE(run.ok()) << run;
      ASSERT_TRUE((*variant)->Synchronize().ok());
      EXPECT_LE(Error(Twin{out.cpu, out_variant.cuda}), kBf16OutTol);
      // Again on the same backend: the same bits (no state carries over from one launch to the
      // next).
      const std::vector<float> once = DownloadCuda(out_variant.cuda);
      UploadCuda(std::vector<float>(once.size(), NAN), out_variant.cuda);
      ASSERT_TRUE(cuda().Synchronize().ok());
      ASSERT_TRUE((*variant)->Attention(q.cuda, kv_cuda, b, p_cuda, out_variant.cuda).ok());
      ASSERT_TRUE((*variant)->Synchronize().ok());
      const std::vector<float> twice = DownloadCuda(out_variant.cuda);
      EXPECT_EQ(std::memcmp(once.data(), twice.data(), once.size() * sizeof(float)), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaAttention,
    ::testing::Values(
        AttnCase{"Gqa4MixedHd64", 8, 2, 64, 16, 0, false,
                 {{0, 17}, {5, 1}, {40, 1}, {0, 1}, {31, 9}}},
        AttnCase{"WindowSinksHd128", 4, 4, 128, 16, 7, true, {{0, 23}, {50, 1}, {12, 5}}},
        AttnCase{"Mqa4Hd16SmallBlocks", 4, 1, 16, 4, 0, true, {{300, 1}, {0, 40}, {7, 3}}},
        AttnCase{"Hd80Window33", 6, 3, 80, 8, 33, false, {{100, 2}, {0, 70}, {64, 1}}},
        AttnCase{"Hd256Block32", 2, 1, 256, 32, 0, false, {{0, 33}, {95, 1}}},
        AttnCase{"ManyDecodes", 8, 8, 32, 16, 0, false,
                 {{3, 1}, {17, 1}, {0, 1}, {64, 1}, {15, 1}, {16, 1}, {200, 1}, {1, 1}}},
        AttnCase{"LongPrefillWindowSinks", 8, 2, 64, 16, 128, true, {{0, 300}}},
        // Qwen3-8B's heads: a long prompt, a chunk after 150 cached tokens, a decode row.
        AttnCase{"LongPrefillGqaHd128", 32, 8, 128, 16, 0, false, {{0, 200}, {150, 70}, {3, 1}}},
        // Long prompts on the flash kernel: many 64-key tiles seen whole (its unmasked path),
        // the causal diagonal, a window edge inside a warp's rows, a chunk after cached tokens.
        AttnCase{"LongChunksGqaHd128", 32, 8, 128, 16, 0, false, {{0, 700}, {333, 250}, {5, 1}}},
        AttnCase{"LongWindowSinksHd128", 16, 4, 128, 16, 200, true, {{100, 600}, {0, 90}}},
        AttnCase{"GptOssLongPrefillWindow", 64, 8, 64, 16, 128, true, {{0, 520}, {40, 1}}},
        // Few rows over long contexts: splits spread over CTAs and merged by a second kernel.
        AttnCase{"SplitGridGqa", 32, 8, 128, 16, 0, false, {{900, 1}, {300, 1}, {255, 1}}},
        AttnCase{"SplitGridWindowSinks", 8, 2, 64, 16, 300, true, {{1000, 1}, {511, 2}}},
        // Decode kernel: Qwen3-8B heads, many decode rows over short and long contexts (one CTA
        // per kv head, keys over 4 warps) and a 4-row chunk (16 tile rows).
        AttnCase{"DecodeBatchGqaHd128", 32, 8, 128, 16, 0, false,
                 {{0, 1}, {15, 1}, {16, 1}, {130, 1}, {700, 1}, {31, 4}, {5, 3}, {2047, 1},
                  {64, 1}, {63, 1}, {1, 1}, {400, 1}, {9, 2}, {250, 1}, {99, 1}, {3000, 1},
                  {77, 1}, {48, 1}, {511, 1}, {12, 1}, {200, 1}, {33, 1}, {1024, 1}, {4, 1},
                  {0, 1}, {17, 1}, {256, 1}, {8, 1}, {140, 1}, {300, 1}, {65, 1}, {2, 1},
                  {1500, 1}, {90, 1}, {18, 1}}},
        // gpt-oss-20b heads (64 over 8 kv heads, hd 64): sliding window 128 with sinks, rows
        // past the window; a 2-row chunk fills the 16 tile rows. Few sequences: keys split over
        // CTAs and merged by the second kernel.
        AttnCase{"DecodeGptOssWindowSinks", 64, 8, 64, 16, 128, true,
                 {{0, 1}, {127, 1}, {128, 1}, {1000, 1}, {300, 2}}},
        AttnCase{"DecodeGptOssFullSinks", 64, 8, 64, 16, 0, true, {{2500, 1}, {40, 2}}},
        // MHA (group 1): up to 16 new rows per sequence on the decode kernel.
        AttnCase{"DecodeMhaChunks", 4, 4, 128, 16, 0, false, {{100, 16}, {3, 9}, {600, 1}}},
        // Blocks of 8 keys: a 16-key tile spans two blocks (per-key block lookups).
        AttnCase{"DecodeSmallBlocksGqaHd128", 16, 4, 128, 8, 0, false,
                 {{300, 1}, {40, 1}, {7, 2}, {0, 1}, {90, 3}}},
        // FP8 caches: long chunks over several 64-key flash tiles, decodes split over CTAs,
        // gpt-oss heads with window and sinks, a head size only the CUDA-core kernel takes.
        AttnCase{"Fp8LongChunksGqaHd128", 32, 8, 128, 16, 0, false,
                 {{0, 300}, {150, 70}, {900, 1}, {3, 1}}, true},
        AttnCase{"Fp8GptOssWindowSinks", 64, 8, 64, 16, 128, true,
                 {{0, 200}, {1000, 1}, {300, 2}}, true},
        AttnCase{"Fp8SplitGridGqa", 32, 8, 128, 16, 0, false, {{900, 1}, {300, 1}}, true},
        // FP8 decode batches: Qwen3-8B heads (a 2-row chunk fills the 8 keys-as-M rows, a 3-row
        // one does not), gpt-oss heads with window and sinks over one CTA per kv head.
        AttnCase{"Fp8DecodeBatchGqaHd128", 32, 8, 128, 16, 0, false,
                 {{0, 1}, {15, 1}, {16, 1}, {130, 1}, {700, 1}, {31, 2}, {5, 3}, {2047, 1},
                  {64, 1}, {63, 1}, {1, 1}, {400, 1}, {250, 1}, {3000, 1}, {48, 1}, {17, 1}},
                 true},
        // Large batches: the shallow ring (and the four-per-SM CTAs), bf16 and FP8.
        AttnCase{"DecodeLargeBatchGqaHd128", 32, 8, 128, 16, 0, false, LargeDecodeBatch()},
        AttnCase{"Fp8DecodeLargeBatchGqaHd128", 32, 8, 128, 16, 0, false, LargeDecodeBatch(),
                 true},
        AttnCase{"Fp8DecodeGptOssWindowSinks", 64, 8, 64, 16, 128, true,
                 {{0, 1}, {127, 1}, {128, 1}, {100, 1}, {37, 1}, {5000, 1}}, true},
        AttnCase{"Fp8Hd80Window33", 6, 3, 80, 8, 33, false, {{100, 2}, {0, 70}}, true}),
    [](const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; });

// A decode row alone (few rows: its key splits run in parallel CTAs) and the same row next to a
// long prefill (many rows: its splits run inside its own CTA) give the same bits.
TEST_F(CudaVsCpuTest, AttentionRowDoesNotDependOnHowItsSplitsRun) {
  std::mt19937 rng(99);
  const int64_t heads = 32, kv_heads = 8, hd = 128, block = 16;
  const int decode_len = 1000, prefill_len = 400;
  const int blocks_a = (decode_len + block - 1) / block, blocks_b = (prefill_len + block - 1) / block;
  const int64_t num_blocks = blocks_a + blocks_b;
  const int width = std::max(blocks_a, blocks_b);
  std::vector<int32_t> tables(2 * width, 0);
  for (int b = 0; b < blocks_a; ++b) tables[b] = b;
  for (int b = 0; b < blocks_b; ++b) tables[width + b] = blocks_a + b;
  const int64_t pool_elems = num_blocks * block * kv_heads * hd;
  const Twin k_pool = Upload(RandomBf16(pool_elems, rng), {num_blocks, block, kv_heads, hd});
  const Twin v_pool = Upload(RandomBf16(pool_elems, rng), {num_blocks, block, kv_heads, hd});
  const KvLayer kv{k_pool.cuda, v_pool.cuda};
  const Twin q = Upload(RandomBf16((1 + prefill_len) * heads * hd, rng, -3, 3),
                        {1 + prefill_len, heads, hd});
  const Twin tables_t = UploadI32(tables, {2, width});
  const Twin qs_both = UploadI32({0, 1, 1 + prefill_len}, {3});
  const Twin lens_both = UploadI32({decode_len, prefill_len}, {2});
  AttentionParams params{.scale = 1.0f / std::sqrt(static_cast<float>(hd))};

  AttentionBatch alone{.query_start = qs_both.cuda.SliceRows(0, 2),
                       .seq_lens = lens_both.cuda.SliceRows(0, 1),
                       .block_tables = tables_t.cuda.SliceRows(0, 1),
                       .num_seqs = 1,
                       .max_query_len = 1,
                       .max_seq_len = decode_len,
                       .block_size = static_cast<int>(block)};
  const Twin out_alone = Poisoned({1, heads, hd});
  ASSERT_TRUE(cuda().Attention(q.cuda.SliceRows(0, 1), kv, alone, params, out_alone.cuda).ok());
  AttentionBatch both{.query_start = qs_both.cuda,
                      .seq_lens = lens_both.cuda,
                      .block_tables = tables_t.cuda,
                      .num_seqs = 2,
                      .max_query_len = prefill_len,
                      .max_seq_len = decode_len,
                      .block_size = static_cast<int>(block)};
  const Twin out_both = Poisoned({1 + prefill_len, heads, hd});
  ASSERT_TRUE(cuda().Attention(q.cuda, kv, both, params, out_both.cuda).ok());
  const std::vector<float> a = DownloadCuda(out_alone.cuda);
  const std::vector<float> b = DownloadCuda(out_both.cuda.SliceRows(0, 1));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); }));
}

// A block-table entry outside the pool makes exactly the rows that see its keys NaN, on every
// kernel: a 300-row prompt whose fourth block (keys 48..63) is bad, with a 64-token window on a
// second run (rows from 127 on no longer see the bad keys), and a decode row at the end.
TEST_F(CudaVsCpuTest, AttentionBadBlockMakesTheRowsThatSeeItNaN) {
  std::mt19937 rng(5);
  const int64_t heads = 8, kv_heads = 2, hd = 128, block = 16, len = 300;
  const int blocks = static_cast<int>((len + block - 1) / block), bad_entry = 3;
  const int64_t num_blocks = blocks;
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  table[bad_entry] = static_cast<int32_t>(num_blocks + 7);
  const int64_t pool_elems = num_blocks * block * kv_heads * hd;
  const Twin k_pool = Upload(RandomBf16(pool_elems, rng), {num_blocks, block, kv_heads, hd});
  const Twin v_pool = Upload(RandomBf16(pool_elems, rng), {num_blocks, block, kv_heads, hd});
  const KvLayer kv{k_pool.cuda, v_pool.cuda};
  const Twin q = Upload(RandomBf16(len * heads * hd, rng, -3, 3), {len, heads, hd});
  const Twin q1 = Upload(RandomBf16(heads * hd, rng, -3, 3), {1, heads, hd});
  const Twin tables_t = UploadI32(table, {1, blocks});
  const Twin prompt_start = UploadI32({0, static_cast<int32_t>(len)}, {2});
  const Twin prompt_len = UploadI32({static_cast<int32_t>(len)}, {1});
  const Twin decode_start = UploadI32({0, 1}, {2});
  const Twin decode_len = UploadI32({static_cast<int32_t>(len)}, {1});
  for (const auto& [name, options] :
       {std::pair{"paged", CudaBackendOptions{.device = 0}},  // no host check of the table
        std::pair{"tensor cores", CudaBackendOptions{.device = 0, .flash_prefill = true,
                                                     .decode_attention = true}},
        std::pair{"keys as M", CudaBackendOptions{.device = 0, .flash_prefill = true,
                                                  .decode_attention = true,
                                                  .decode_attention_keys_as_m = true}}}) {
    for (const int window : {0, 64}) {
      SCOPED_TRACE(absl::StrCat(name, " window ", window));
      auto backend = CudaBackend::Create(options);
      ASSERT_TRUE(backend.ok()) << backend.status();
      ASSERT_TRUE(cuda().Synchronize().ok());  // inputs written on the fixture's stream
      const AttentionParams params{.scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                                   .sliding_window = window};
      // The prompt: row i sees keys (i - window, i]; the bad keys are 48..63.
      const Twin out = Poisoned({len, heads, hd});
      AttentionBatch prompt{.query_start = prompt_start.cuda,
                            .seq_lens = prompt_len.cuda,
                            .block_tables = tables_t.cuda,
                            .num_seqs = 1,
                            .max_query_len = static_cast<int>(len),
                            .max_seq_len = static_cast<int>(len),
                            .block_size = static_cast<int>(block)};
      const absl::Status run = (*backend)->Attention(q.cuda, kv, prompt, params, out.cuda);
      ASSERT_TRUE(run.ok()) << run;
      // The decode row at position 299 (its own key is the cache's last).
      const Twin out1 = Poisoned({1, heads, hd});
      AttentionBatch decode{.query_start = decode_start.cuda,
                            .seq_lens = decode_len.cuda,
                            .block_tables = tables_t.cuda,
                            .num_seqs = 1,
                            .max_query_len = 1,
                            .max_seq_len = static_cast<int>(len),
                            .block_size = static_cast<int>(block)};
      ASSERT_TRUE((*backend)->Attention(q1.cuda, kv, decode, params, out1.cuda).ok());
      ASSERT_TRUE((*backend)->Synchronize().ok());
      const std::vector<float> rows = DownloadCuda(out.cuda);
      for (int64_t i = 0; i < len; ++i) {
        const bool sees_bad = i >= 48 && (window == 0 || i - window + 1 <= 63);
        int64_t nans = 0;
        for (int64_t e = 0; e < heads * hd; ++e) nans += std::isnan(rows[i * heads * hd + e]);
        EXPECT_EQ(nans, sees_bad ? heads * hd : 0) << "row " << i;
      }
      const std::vector<float> last = DownloadCuda(out1.cuda);
      const int64_t nans = std::count_if(last.begin(), last.end(), [](float x) {
        return std::isnan(x);
      });
      EXPECT_EQ(nans, window == 0 ? heads * hd : 0);
    }
  }
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing

namespace xserv::kernels::cuda::testing {
namespace {

// The inputs of the QkNormRopeWriteKv tests: random bf16 q, k, v of kTokens tokens, norm
// weights, a rotary table, positions, and cache slots in kNumBlocks blocks of kBlock.
class QkNormRopeTest : public CudaVsCpuTest {
 protected:
  static constexpr int64_t kTokens = 9, kBlock = 16, kNumBlocks = 3, kPositions = 64;
  struct Inputs {
    std::vector<float> q, k, v;
    Twin q_norm, k_norm, cos_sin, positions, slots;
    std::vector<int32_t> slot_ids;
  };
  Inputs MakeInputs(int64_t h, int64_t kvh, int64_t hd, std::mt19937& rng) {
    Inputs in;
    in.q = RandomBf16(kTokens * h * hd, rng, -2, 2);
    in.k = RandomBf16(kTokens * kvh * hd, rng, -2, 2);
    in.v = RandomBf16(kTokens * kvh * hd, rng, -2, 2);
    in.q_norm = Upload(RandomBf16(hd, rng, 0.5f, 1.5f), {hd});
    in.k_norm = Upload(RandomBf16(hd, rng, 0.5f, 1.5f), {hd});
    std::vector<float> table(kPositions * hd);
    for (float& x : table) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    in.cos_sin = Upload(table, {kPositions, hd}, DType::kF32);
    std::vector<int32_t> positions(kTokens);
    in.slot_ids.resize(kTokens);
    for (int64_t t = 0; t < kTokens; ++t) {
      positions[t] = static_cast<int32_t>((t * 7 + 3) % kPositions);
      in.slot_ids[t] = static_cast<int32_t>((t * 5 + 2) % (kNumBlocks * kBlock));
    }
    in.positions = UploadI32(positions, {kTokens});
    in.slots = UploadI32(in.slot_ids, {kTokens});
    return in;
  }
};

// The fused per-head norm + rotary + KV write against the separate CUDA ops it replaces (the
// Backend default, called explicitly), bit for bit, and against the CPU backend: Qwen3-8B's heads
// (norms and rotation), gpt-oss-20b's (rotation only, hd 64), norms only at hd 256, hd 192, and
// hd 80, which the fused kernel does not take (the default path runs). Then the same values as
// column slices of one [T, (H + 2 KVH) hd] projection (a stacked QKV): the same bits again.
TEST_F(QkNormRopeTest, QkNormRopeWriteKvIsTheSeparateOpsFused) {
  struct Case {
    int heads, kv_heads, hd;
    bool norm, rope;
  };
  std::mt19937 rng(7);
  for (const Case c : {Case{32, 8, 128, true, true}, Case{64, 8, 64, false, true},
                       Case{4, 2, 256, true, false}, Case{6, 3, 192, true, true},
                       Case{8, 8, 80, true, true}}) {
    SCOPED_TRACE(absl::StrCat("heads ", c.heads, "/", c.kv_heads, " hd ", c.hd));
    const int64_t tokens = kTokens, block = kBlock, num_blocks = kNumBlocks;
    const int64_t hd = c.hd, h = c.heads, kvh = c.kv_heads;
    const Inputs in = MakeInputs(h, kvh, hd, rng);
    const std::vector<float>&q_host = in.q, &k_host = in.k, &v_host = in.v;
    const std::vector<float> zeros(num_blocks * block * kvh * hd, 0.0f);
    const std::initializer_list<int64_t> pool{num_blocks, block, kvh, hd};
    const Twin &q_norm = in.q_norm, &k_norm = in.k_norm, &cos_sin = in.cos_sin;
    const Twin &pos_t = in.positions, &slots_t = in.slots;
    auto params = [&](bool dev) {
      QkNormRope p{.eps = 1e-6f};
      if (c.norm) {
        p.q_norm = dev ? &q_norm.cuda : &q_norm.cpu;
        p.k_norm = dev ? &k_norm.cuda : &k_norm.cpu;
      }
      if (c.rope) {
        p.positions = dev ? &pos_t.cuda : &pos_t.cpu;
        p.cos_sin = dev ? &cos_sin.cuda : &cos_sin.cpu;
      }
      return p;
    };
    // One set of q, k, v and caches per run.
    struct Run {
      Twin q, k, v, k_cache, v_cache;
    };
    auto make_run = [&] {
      return Run{Upload(q_host, {tokens, h, hd}), Upload(k_host, {tokens, kvh, hd}),
                 Upload(v_host, {tokens, kvh, hd}), Upload(zeros, pool), Upload(zeros, pool)};
    };
    const Run fused = make_run(), separate = make_run();
    // The fused kernel is opt-in: a second backend on the same device runs it (its own stream,
    // so the inputs are synchronised first and its results before they are read).
    auto fusing = CudaBackend::Create(
        CudaBackendOptions{.device = 0, .check_each_op = true, .fuse_qk_norm_rope = true});
    ASSERT_TRUE(fusing.ok()) << fusing.status();
    ASSERT_TRUE(cuda().Synchronize().ok());
    const absl::Status f = (*fusing)->QkNormRopeWriteKv(
        fused.q.cuda, fused.k.cuda, fused.v.cuda, params(true),
        {fused.k_cache.cuda, fused.v_cache.cuda}, slots_t.cuda);
    ASSERT_TRUE(f.ok()) << f;
    ASSERT_TRUE((*fusing)->Synchronize().ok());
    ASSERT_TRUE(cpu().QkNormRopeWriteKv(fused.q.cpu, fused.k.cpu, fused.v.cpu, params(false),
                                        {fused.k_cache.cpu, fused.v_cache.cpu}, slots_t.cpu)
                    .ok());
    for (const Twin* t : {&fused.q, &fused.k, &fused.k_cache, &fused.v_cache}) {
      EXPECT_LE(Error(*t), kBf16OutTol);
    }
    const absl::Status s = cuda().Backend::QkNormRopeWriteKv(
        separate.q.cuda, separate.k.cuda, separate.v.cuda, params(true),
        {separate.k_cache.cuda, separate.v_cache.cuda}, slots_t.cuda);
    ASSERT_TRUE(s.ok()) << s;
    auto same_bits = [&](const Tensor& a, const Tensor& b) {
      const std::vector<float> x = DownloadCuda(a), y = DownloadCuda(b);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    };
    same_bits(fused.q.cuda, separate.q.cuda);
    same_bits(fused.k.cuda, separate.k.cuda);
    same_bits(fused.k_cache.cuda, separate.k_cache.cuda);
    same_bits(fused.v_cache.cuda, separate.v_cache.cuda);

    if (hd % 64 != 0) continue;  // strided views: the fused kernel only
    std::vector<float> qkv_host;
    for (int64_t t = 0; t < tokens; ++t) {
      for (const auto& [src, n] : {std::pair{&q_host, h}, std::pair{&k_host, kvh},
                                   std::pair{&v_host, kvh}}) {
        qkv_host.insert(qkv_host.end(), src->begin() + t * n * hd, src->begin() + (t + 1) * n * hd);
      }
    }
    const int64_t width = (h + 2 * kvh) * hd;
    const Twin qkv = Upload(qkv_host, {tokens, width});
    const Twin k_cache = Upload(zeros, pool), v_cache = Upload(zeros, pool);
    auto slice = [&](int64_t first, int64_t count) {
      return qkv.cuda.SliceLast(first * hd, (first + count) * hd).UnflattenLast(count, hd);
    };
    const Tensor q_view = slice(0, h), k_view = slice(h, kvh);
    ASSERT_TRUE(cuda().Synchronize().ok());
    const absl::Status strided = (*fusing)->QkNormRopeWriteKv(
        q_view, k_view, slice(h + kvh, kvh), params(true), {k_cache.cuda, v_cache.cuda},
        slots_t.cuda);
    ASSERT_TRUE(strided.ok()) << strided;
    ASSERT_TRUE((*fusing)->Synchronize().ok());
    const std::vector<float> all = DownloadCuda(qkv.cuda);
    const std::vector<float> q_fused = DownloadCuda(fused.q.cuda);
    const std::vector<float> k_fused = DownloadCuda(fused.k.cuda);
    for (int64_t t = 0; t < tokens; ++t) {
      EXPECT_EQ(std::memcmp(&all[t * width], &q_fused[t * h * hd], h * hd * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(&all[t * width + h * hd], &k_fused[t * kvh * hd],
                            kvh * hd * sizeof(float)),
                0);
    }
    same_bits(k_cache.cuda, fused.k_cache.cuda);
    same_bits(v_cache.cuda, fused.v_cache.cuda);
  }
}

// With an FP8 cache the fused kernel quantises k (after its norm and rotation) and v per (token,
// kv head) as the separate ops' WriteKv does: the same codes and scales, bit for bit, and those
// are the host quantiser's (kernels/fp8.h) of the bf16 k and v the kernel leaves.
TEST_F(QkNormRopeTest, QkNormRopeWriteKvFp8CacheIsTheSeparateOpsFused) {
  struct Case {
    int heads, kv_heads, hd;
  };
  std::mt19937 rng(8);
  auto fusing = CudaBackend::Create(
      CudaBackendOptions{.device = 0, .check_each_op = true, .fuse_qk_norm_rope = true});
  ASSERT_TRUE(fusing.ok()) << fusing.status();
  for (const Case c : {Case{32, 8, 128}, Case{64, 8, 64}, Case{4, 2, 256}}) {
    SCOPED_TRACE(absl::StrCat("heads ", c.heads, "/", c.kv_heads, " hd ", c.hd));
    const int64_t tokens = kTokens, block = kBlock, num_blocks = kNumBlocks;
    const int64_t hd = c.hd, h = c.heads, kvh = c.kv_heads;
    const Inputs in = MakeInputs(h, kvh, hd, rng);
    const std::vector<float>&q_host = in.q, &k_host = in.k, &v_host = in.v;
    const Twin &q_norm = in.q_norm, &k_norm = in.k_norm, &cos_sin = in.cos_sin;
    const Twin &pos_t = in.positions, &slots_t = in.slots;
    const std::vector<int32_t>& slots = in.slot_ids;
    const QkNormRope params{.q_norm = &q_norm.cuda, .k_norm = &k_norm.cuda, .eps = 1e-6f,
                            .positions = &pos_t.cuda, .cos_sin = &cos_sin.cuda};
    struct Run {
      Twin q, k, v;
      KvLayer cache;
    };
    auto make_run = [&] {
      Run r{Upload(q_host, {tokens, h, hd}), Upload(k_host, {tokens, kvh, hd}),
            Upload(v_host, {tokens, kvh, hd}),
            KvLayer{.k = Keep(cuda().Allocate(DType::kF8E4M3, {num_blocks, block, kvh, hd})),
                    .v = Keep(cuda().Allocate(DType::kF8E4M3, {num_blocks, block, kvh, hd})),
                    .k_scale = Keep(cuda().Allocate(DType::kF32, {num_blocks, block, kvh})),
                    .v_scale = Keep(cuda().Allocate(DType::kF32, {num_blocks, block, kvh}))}};
      for (const Tensor* t : {&r.cache.k, &r.cache.v, &r.cache.k_scale, &r.cache.v_scale}) {
        EXPECT_TRUE(cuda().Zero(*t).ok());
      }
      return r;
    };
    const Run fused = make_run(), separate = make_run();
    ASSERT_TRUE(cuda().Synchronize().ok());
    const absl::Status f = (*fusing)->QkNormRopeWriteKv(fused.q.cuda, fused.k.cuda, fused.v.cuda,
                                                         params, fused.cache, slots_t.cuda);
    ASSERT_TRUE(f.ok()) << f;
    ASSERT_TRUE((*fusing)->Synchronize().ok());
    const absl::Status s = cuda().Backend::QkNormRopeWriteKv(
        separate.q.cuda, separate.k.cuda, separate.v.cuda, params, separate.cache, slots_t.cuda);
    ASSERT_TRUE(s.ok()) << s;
    const auto bytes = [&](const Tensor& t) {
      std::vector<uint8_t> out(t.nbytes());
      EXPECT_TRUE(cuda().CopyToHost(t, out.data()).ok());
      return out;
    };
    EXPECT_EQ(bytes(fused.k.cuda), bytes(separate.k.cuda));
    EXPECT_EQ(bytes(fused.cache.k), bytes(separate.cache.k));
    EXPECT_EQ(bytes(fused.cache.v), bytes(separate.cache.v));
    EXPECT_EQ(bytes(fused.cache.k_scale), bytes(separate.cache.k_scale));
    EXPECT_EQ(bytes(fused.cache.v_scale), bytes(separate.cache.v_scale));
    // The host quantiser of what was cached: the normed, rotated k and the untouched v.
    const std::vector<float> k_after = DownloadCuda(fused.k.cuda);
    const std::vector<uint8_t> codes_k = bytes(fused.cache.k), codes_v = bytes(fused.cache.v);
    std::vector<float> scales_k(num_blocks * block * kvh), scales_v(scales_k.size());
    ASSERT_TRUE(cuda().CopyToHost(fused.cache.k_scale, scales_k.data()).ok());
    ASSERT_TRUE(cuda().CopyToHost(fused.cache.v_scale, scales_v.data()).ok());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t head = 0; head < kvh; ++head) {
        const int64_t at = slots[t] * kvh + head;
        std::vector<uint8_t> want(hd);
        const float k_scale = QuantizeFp8Group(
            std::span(k_after).subspan((t * kvh + head) * hd, hd), want.data());
        EXPECT_EQ(k_scale, scales_k[at]) << "token " << t << " head " << head;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), codes_k.begin() + at * hd));
        const float v_scale = QuantizeFp8Group(
            std::span(v_host).subspan((t * kvh + head) * hd, hd), want.data());
        EXPECT_EQ(v_scale, scales_v[at]) << "token " << t << " head " << head;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), codes_v.begin() + at * hd));
      }
    }
  }
}

}  // namespace
}  // namespace xserv::kernels::cuda::testing
