// BatchBuilder's padding for graph replays (BuildOptions): the real sequences come first exactly
// as without padding, each padding row is a one-token sequence at position 0 that writes no KV
// (slot -1) and owns one logits row; max_seq_len is raised to the option. DecodeGraphs on a
// backend without graphs turns itself off instead of building padded steps.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/model/batch_builder.h"
#include "worker/model/decode_graphs.h"
#include "worker/model/profile_forward.h"
#include "tests/unit/model/model_test_util.h"

namespace xserv::model {
namespace {

std::vector<int32_t> Host(kernels::Backend& backend, const kernels::Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(backend.CopyToHost(t, out.data()).ok());
  return out;
}

TEST(BatchBuilder, PadsDecodeStepsForGraphs) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto builder = BatchBuilder::Create(
      backend, BatchLimits{.max_tokens = 16, .max_seqs = 8, .max_blocks_per_seq = 4,
                           .block_size = 4});
  ASSERT_TRUE(builder.ok()) << builder.status();
  const std::vector<int32_t> a = {11}, b = {22}, table_a = {3, 1}, table_b = {2};
  const std::vector<SequenceChunk> chunks = {
      {.tokens = a, .start_position = 5, .block_table = table_a},
      {.tokens = b, .start_position = 2, .block_table = table_b}};
  auto in = builder->Build(chunks, {.pad_seqs_to = 4, .min_max_seq_len = 100});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->attention.num_seqs, 4);
  EXPECT_EQ(in->attention.max_seq_len, 100);
  EXPECT_EQ(Host(backend, in->token_ids), (std::vector<int32_t>{11, 22, 0, 0}));
  EXPECT_EQ(Host(backend, in->positions), (std::vector<int32_t>{5, 2, 0, 0}));
  EXPECT_EQ(Host(backend, in->attention.slot_mapping), (std::vector<int32_t>{1 * 4 + 1, 2 * 4 + 2, -1, -1}));
  EXPECT_EQ(Host(backend, in->attention.query_start), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Host(backend, in->attention.seq_lens), (std::vector<int32_t>{6, 3, 1, 1}));
  EXPECT_EQ(Host(backend, in->logits_indices), (std::vector<int32_t>{0, 1, 2, 3}));

  auto plain = builder->Build(chunks);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->attention.num_seqs, 2);
  EXPECT_EQ(plain->attention.max_seq_len, 6);
  EXPECT_FALSE(builder->Build(chunks, {.pad_seqs_to = 9}).ok());  // beyond max_seqs
}

// Window tables (BatchLimits::window_tables): a chunk's table is the full one, then the window
// one; the sliding-window layers get the second as their block tables and KV slots, released
// entries (-1) before the window passed through, and a written position must have a block.
TEST(BatchBuilder, SplitsWindowTablesIntoTheirOwnBatch) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto builder = BatchBuilder::Create(
      backend, BatchLimits{.max_tokens = 16, .max_seqs = 4, .max_blocks_per_seq = 3,
                           .block_size = 4, .window_tables = true});
  ASSERT_TRUE(builder.ok()) << builder.status();
  const std::vector<int32_t> a = {11, 12}, b = {22};
  // a: positions 9, 10 over full blocks {5, 6, 7} and window blocks {-1, 2, 3};
  // b: position 2 over full {4} and window {1}.
  const std::vector<int32_t> table_a = {5, 6, 7, -1, 2, 3}, table_b = {4, 1};
  const std::vector<SequenceChunk> chunks = {
      {.tokens = a, .start_position = 9, .block_table = table_a},
      {.tokens = b, .start_position = 2, .block_table = table_b}};
  auto in = builder->Build(chunks, {.pad_seqs_to = 3});
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_TRUE(in->has_window_attention);
  EXPECT_EQ(Host(backend, in->attention.slot_mapping),
            (std::vector<int32_t>{7 * 4 + 1, 7 * 4 + 2, 4 * 4 + 2, -1}));
  EXPECT_EQ(Host(backend, in->window_attention.slot_mapping),
            (std::vector<int32_t>{3 * 4 + 1, 3 * 4 + 2, 1 * 4 + 2, -1}));
  EXPECT_EQ(Host(backend, in->attention.block_tables),
            (std::vector<int32_t>{5, 6, 7, 4, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Host(backend, in->window_attention.block_tables),
            (std::vector<int32_t>{-1, 2, 3, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Host(backend, in->window_attention.seq_lens),
            Host(backend, in->attention.seq_lens));
  EXPECT_EQ(in->window_attention.num_seqs, 3);

  const std::vector<int32_t> odd = {5, 6, 7};
  EXPECT_FALSE(builder->Build(std::vector<SequenceChunk>{
                                  {.tokens = b, .start_position = 2, .block_table = odd}})
                   .ok());
  const std::vector<int32_t> unheld = {4, -1};  // position 2's window block released
  EXPECT_FALSE(builder->Build(std::vector<SequenceChunk>{
                                  {.tokens = b, .start_position = 2, .block_table = unheld}})
                   .ok());
  // Without window tables nothing changes.
  auto plain_builder = BatchBuilder::Create(
      backend, BatchLimits{.max_tokens = 16, .max_seqs = 4, .max_blocks_per_seq = 3,
                           .block_size = 4});
  ASSERT_TRUE(plain_builder.ok());
  auto plain = plain_builder->Build(std::vector<SequenceChunk>{
      {.tokens = b, .start_position = 2, .block_table = table_b}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->has_window_attention);
}

// The step's new-row counts as a mask (AttentionBatch::query_len_mask): bit n - 1 for n rows,
// bit 31 for 32 or more; padding rows count as one-row sequences.
TEST(BatchBuilder, ReportsTheQueryLengthsItHolds) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto builder = BatchBuilder::Create(
      backend, BatchLimits{.max_tokens = 64, .max_seqs = 8, .max_blocks_per_seq = 16,
                           .block_size = 4});
  ASSERT_TRUE(builder.ok()) << builder.status();
  const std::vector<int32_t> three(3, 7), forty(40, 9), table(16, 0);
  const std::vector<SequenceChunk> chunks = {
      {.tokens = three, .start_position = 0, .block_table = table},
      {.tokens = forty, .start_position = 0, .block_table = table}};
  auto in = builder->Build(chunks);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->attention.query_len_mask, (1u << 2) | (1u << 31));
  EXPECT_EQ(in->attention.max_query_len, 40);
  auto padded = builder->Build({chunks.data(), 1}, {.pad_seqs_to = 2});
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(padded->attention.query_len_mask, (1u << 2) | 1u);
}

TEST(BatchBuilder, DecodeBucketsBoundPadding) {
  EXPECT_EQ(DecodeGraphs::Bucket(1), 1);
  EXPECT_EQ(DecodeGraphs::Bucket(3), 4);
  EXPECT_EQ(DecodeGraphs::Bucket(17), 32);
  EXPECT_EQ(DecodeGraphs::Bucket(33), 64);
  EXPECT_EQ(DecodeGraphs::Bucket(65), 96);
  for (int64_t n = 1; n <= 512; ++n) {
    const int64_t b = DecodeGraphs::Bucket(n);
    EXPECT_GE(b, n);
    EXPECT_LE(b - n, n <= 32 ? n - 1 : 31) << n;
  }
}

// The start-up profiling pass runs the largest step (clamped to the model's workspace) and leaves
// the backend usable; the CPU backend has no graphs, so DecodeGraphs turns itself off.
TEST(ProfileForward, RunsTheLargestStepOnce) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto model = LoadModel(testing::ModelDir("qwen3-tiny"), backend,
                         ModelLoadOptions{.max_num_tokens = 48});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(ProfileForward(backend, **model, 48, 16).ok());
  EXPECT_TRUE(ProfileForward(backend, **model, 1000, 16).ok());  // clamped to 48
  auto kv = KvCache::Allocate(backend, (*model)->config(), 4, 16);
  ASSERT_TRUE(kv.ok());
  auto builder = BatchBuilder::Create(backend, BatchLimits{.max_tokens = 8, .max_seqs = 4,
                                                           .max_blocks_per_seq = 2,
                                                           .block_size = 16});
  ASSERT_TRUE(builder.ok());
  DecodeGraphs graphs(backend, **model, *kv, *builder, 4, 32);
  const std::vector<int32_t> token = {5}, table = {0};
  const std::vector<SequenceChunk> step = {
      {.tokens = token, .start_position = 0, .block_table = table}};
  EXPECT_FALSE(graphs.Accepts(step));
}

}  // namespace
}  // namespace xserv::model
