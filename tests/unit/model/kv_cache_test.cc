// KvCache's FP8 pools (KvLayout::fp8) and storage sharing (KvLayout::share_window_layers): the k-th sliding-window layer and the
// k-th full layer use one K/V pair, counted from a pipeline stage's global first layer; a block
// costs the pairs, not the layers; swap and copy-on-write move every pair, so a block keeps what
// either kind of layer wrote into it.
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/model/kv_cache.h"

namespace xserv::model {
namespace {

using kernels::DType;

// gpt-oss's alternation: even layers slide, odd layers see everything.
ModelConfig Alternating(int64_t num_layers) {
  ModelConfig c;
  c.num_layers = num_layers;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.sliding_window = 32;
  for (int64_t l = 0; l < num_layers; ++l) {
    c.layer_types.push_back(l % 2 == 0 ? AttentionType::kSliding : AttentionType::kFull);
  }
  return c;
}

TEST(KvCache, WindowLayersShareStorageWithFullLayers) {
  const ModelConfig c = Alternating(5);
  EXPECT_EQ(KvCache::StorageOfLayers(c, {}), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(KvCache::StorageOfLayers(c, {.share_window_layers = true}),
            (std::vector<int64_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(KvCache::NumStorages(c, {.share_window_layers = true}), 3);
  // Pipeline stages: a stage's rank_config keeps its layers and the global layer_types. With
  // sliding, sliding, full, sliding, sliding, full the start decides the map.
  ModelConfig uneven = Alternating(6);
  uneven.layer_types = {AttentionType::kSliding, AttentionType::kSliding, AttentionType::kFull,
                        AttentionType::kSliding, AttentionType::kSliding, AttentionType::kFull};
  EXPECT_EQ(KvCache::StorageOfLayers(uneven, {.share_window_layers = true}),
            (std::vector<int64_t>{0, 1, 0, 2, 3, 1}));
  ModelConfig stage = uneven;
  stage.num_layers = 3;
  EXPECT_EQ(KvCache::StorageOfLayers(stage, {.share_window_layers = true, .first_layer = 2}),
            (std::vector<int64_t>{0, 0, 1}));  // full, sliding, sliding
  EXPECT_EQ(KvCache::StorageOfLayers(stage, {.share_window_layers = true, .first_layer = 3}),
            (std::vector<int64_t>{0, 1, 0}));  // sliding, sliding, full
  EXPECT_EQ(KvCache::NumStorages(uneven, {.share_window_layers = true}), 4);
  // No sliding layer: nothing to share.
  ModelConfig dense = Alternating(3);
  dense.layer_types.assign(3, AttentionType::kFull);
  dense.sliding_window = 0;
  EXPECT_EQ(KvCache::NumStorages(dense, {.share_window_layers = true}), 3);

  const int64_t per_pair = 2 * 16 * 2 * 4 * 2;  // K and V, 16 tokens, 2 heads of 4, bf16
  EXPECT_EQ(KvCache::BytesPerBlock(Alternating(4), 16, DType::kBF16), 4 * per_pair);
  EXPECT_EQ(KvCache::BytesPerBlock(Alternating(4), 16, DType::kBF16, {.share_window_layers = true}),
            2 * per_pair);
}

TEST(KvCache, SharedLayersSeeOneTensorAndSwapKeepsEveryPair) {
  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  const ModelConfig c = Alternating(4);
  auto kv = KvCache::Allocate(backend, c, /*num_blocks=*/4, /*block_size=*/2,
                              /*num_host_blocks=*/2, {.share_window_layers = true});
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_EQ(kv->layers().size(), 4u);
  EXPECT_EQ(kv->layers()[0].k.data, kv->layers()[1].k.data);
  EXPECT_EQ(kv->layers()[2].v.data, kv->layers()[3].v.data);
  EXPECT_NE(kv->layers()[0].k.data, kv->layers()[2].k.data);

  // Distinct values in every pair's K and V.
  const int64_t per_tensor = 4 * 2 * 2 * 4;
  for (int pair = 0; pair < 2; ++pair) {
    for (int kind = 0; kind < 2; ++kind) {
      const kernels::KvLayer& layer = kv->layers()[2 * pair];
      std::vector<float> values(per_tensor);
      std::iota(values.begin(), values.end(), 1000.0f * (2 * pair + kind + 1));
      ASSERT_TRUE(backend.CopyFromHost(values.data(), kind == 0 ? layer.k : layer.v).ok());
    }
  }
  const auto block_of = [&](const kernels::Tensor& t, int64_t block) {
    std::vector<float> out(per_tensor / 4);
    EXPECT_TRUE(backend.CopyToHost(t.SliceRows(block, block + 1), out.data()).ok());
    return out;
  };
  std::vector<std::vector<float>> before;
  for (const kernels::KvLayer& layer : kv->layers()) {
    before.push_back(block_of(layer.k, 1));
    before.push_back(block_of(layer.v, 1));
  }
  // Block 1 out to host block 0, back into device block 3; then copy 3 -> 2.
  const std::vector<KvCache::BlockPair> out = {{1, 0}}, in = {{0, 3}}, copy = {{3, 2}};
  ASSERT_TRUE(kv->SwapOut(out).ok());
  ASSERT_TRUE(kv->SwapIn(in).ok());
  ASSERT_TRUE(kv->CopyBlocks(copy).ok());
  for (size_t l = 0; l < kv->layers().size(); ++l) {
    for (int64_t block : {3, 2}) {
      EXPECT_EQ(block_of(kv->layers()[l].k, block), before[2 * l]) << "layer " << l;
      EXPECT_EQ(block_of(kv->layers()[l].v, block), before[2 * l + 1]) << "layer " << l;
    }
  }
  EXPECT_FALSE(kv->SwapOut(std::vector<KvCache::BlockPair>{{4, 0}}).ok());
  // A stage's layers past the model's layer types: refused, not read as full layers.
  EXPECT_FALSE(KvCache::Allocate(backend, c, 4, 2, 0, {.share_window_layers = true, .first_layer = 1})
                   .ok());
}

// FP8 (KvLayout::fp8): E4M3 code pools plus f32 scales per (slot, kv head); a block costs the
// codes and the scales; swap and copy-on-write move both, shared pairs included.
TEST(KvCache, Fp8PoolsKeepCodesAndScalesTogether) {
  const ModelConfig c = Alternating(4);
  const int64_t per_pair = 2 * 16 * 2 * (4 + 4);  // K and V, 16 tokens, 2 heads: 4 codes + scale
  EXPECT_EQ(KvCache::BytesPerBlock(c, 16, DType::kBF16, {.fp8 = true}), 4 * per_pair);
  EXPECT_EQ(KvCache::BytesPerBlock(c, 16, DType::kBF16, {.fp8 = true, .share_window_layers = true}),
            2 * per_pair);

  kernels::cpu::CpuBackend backend(kernels::cpu::CpuBackendOptions{});
  auto kv = KvCache::Allocate(backend, c, /*num_blocks=*/4, /*block_size=*/2,
                              /*num_host_blocks=*/2, {.fp8 = true, .share_window_layers = true});
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_EQ(kv->layers().size(), 4u);
  for (const kernels::KvLayer& layer : kv->layers()) {
    EXPECT_TRUE(layer.fp8());
    EXPECT_EQ(layer.v.dtype, DType::kF8E4M3);
    EXPECT_EQ(layer.k_scale.dtype, DType::kF32);
    EXPECT_EQ(layer.v_scale.Describe(), "F32[4, 2, 2]");
  }
  EXPECT_EQ(kv->layers()[0].k_scale.data, kv->layers()[1].k_scale.data);
  EXPECT_NE(kv->layers()[0].v_scale.data, kv->layers()[2].v_scale.data);

  // Distinct codes and scales in every tensor of both pairs.
  const auto tensors_of = [](const kernels::KvLayer& l) {
    return std::vector<kernels::Tensor>{l.k, l.v, l.k_scale, l.v_scale};
  };
  for (int pair = 0; pair < 2; ++pair) {
    const std::vector<kernels::Tensor> tensors = tensors_of(kv->layers()[2 * pair]);
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::vector<uint8_t> bytes(tensors[i].nbytes());
      std::iota(bytes.begin(), bytes.end(), static_cast<uint8_t>(37 * (4 * pair + i) + 1));
      ASSERT_TRUE(backend.CopyFromHost(bytes.data(), tensors[i]).ok());
    }
  }
  const auto block_of = [&](const kernels::Tensor& t, int64_t block) {
    const kernels::Tensor rows = t.SliceRows(block, block + 1);
    std::vector<uint8_t> out(rows.nbytes());
    EXPECT_TRUE(backend.CopyToHost(rows, out.data()).ok());
    return out;
  };
  std::vector<std::vector<uint8_t>> before;
  for (const kernels::KvLayer& layer : kv->layers()) {
    for (const kernels::Tensor& t : tensors_of(layer)) before.push_back(block_of(t, 1));
  }
  ASSERT_TRUE(kv->SwapOut(std::vector<KvCache::BlockPair>{{1, 0}}).ok());
  ASSERT_TRUE(kv->SwapIn(std::vector<KvCache::BlockPair>{{0, 3}}).ok());
  ASSERT_TRUE(kv->CopyBlocks(std::vector<KvCache::BlockPair>{{3, 2}}).ok());
  for (size_t l = 0; l < kv->layers().size(); ++l) {
    const std::vector<kernels::Tensor> tensors = tensors_of(kv->layers()[l]);
    for (size_t i = 0; i < tensors.size(); ++i) {
      for (int64_t block : {3, 2}) {
        EXPECT_EQ(block_of(tensors[i], block), before[4 * l + i])
            << "layer " << l << " tensor " << i << " block " << block;
      }
    }
  }
}

}  // namespace
}  // namespace xserv::model
