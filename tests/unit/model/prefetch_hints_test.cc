// Backend::PrefetchAfterNextMatmul as the models call it: every hint names the weight of the
// matmul after the next one (what the CUDA backend prefetches into L2 as the next one ends), for
// a dense Qwen3 with the pre-norms as their own ops and fused into the projections.
#include <cstdint>
#include <vector>

#include "tests/unit/model/model_test_util.h"

namespace xserv::model::testing {
namespace {

// The CPU backend, recording each hint's weight and each matmul's weight in call order.
class RecordingBackend : public kernels::cpu::CpuBackend {
 public:
  struct Event {
    bool hint;
    const void* weight;
  };
  using CpuBackend::CpuBackend;

  void PrefetchAfterNextMatmul(const kernels::Tensor& weight) override {
    events.push_back({true, weight.data});
  }
  absl::Status Matmul(const kernels::Tensor& x, const kernels::Tensor& w,
                      const kernels::Tensor* bias, const kernels::Tensor& out) override {
    events.push_back({false, w.data});
    return CpuBackend::Matmul(x, w, bias, out);
  }
  absl::Status MatmulFp8(const kernels::Tensor& x, const kernels::Fp8Weight& w,
                         const kernels::Tensor* bias, const kernels::Tensor& out) override {
    events.push_back({false, w.codes.data});
    return CpuBackend::MatmulFp8(x, w, bias, out);
  }

  std::vector<Event> events;
};

class PrefetchHints : public ::testing::TestWithParam<bool> {};  // param: fused pre-norms

TEST_P(PrefetchHints, NameTheMatmulAfterTheNext) {
  RecordingBackend backend(
      kernels::cpu::CpuBackendOptions{.num_threads = 2, .fuse_norm_matmul = GetParam()});
  auto model = LoadModel(ModelDir("qwen3-tiny"), backend, ModelLoadOptions{.max_num_tokens = 64});
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int64_t kBlock = 16;
  auto kv = KvCache::Allocate(backend, (*model)->rank_config(), /*num_blocks=*/4, kBlock,
                              /*num_host_blocks=*/0);
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto builder = BatchBuilder::Create(
      backend, BatchLimits{.max_tokens = 64, .max_seqs = 1, .max_blocks_per_seq = 4,
                           .block_size = kBlock});
  ASSERT_TRUE(builder.ok()) << builder.status();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<int32_t> table = {2};
  const std::vector<SequenceChunk> chunks = {SequenceChunk{.tokens = tokens, .block_table = table}};
  auto in = builder->Build(chunks);
  ASSERT_TRUE(in.ok()) << in.status();
  auto logits = backend.Allocate(kernels::DType::kF32, {1, (*model)->config().vocab_size});
  ASSERT_TRUE(logits.ok());
  backend.events.clear();  // loading may have run ops
  ASSERT_TRUE((*model)->Forward(*in, kv->layers(), logits->view(), nullptr).ok());

  // o, gate_up and down in every layer, and the next layer's first projection after down.
  const int64_t layers = (*model)->config().num_layers;
  int64_t hints = 0;
  const auto& events = backend.events;
  for (size_t i = 0; i < events.size(); ++i) {
    if (!events[i].hint) continue;
    ++hints;
    std::vector<const void*> next;  // the weights of the two matmuls after the hint
    for (size_t j = i + 1; j < events.size() && next.size() < 2; ++j) {
      ASSERT_FALSE(events[j].hint && next.empty()) << "hint " << hints << " never taken";
      if (!events[j].hint) next.push_back(events[j].weight);
    }
    ASSERT_EQ(next.size(), 2u) << "hint " << hints << " has no matmul after the next";
    EXPECT_EQ(next[1], events[i].weight) << "hint " << hints;
  }
  EXPECT_EQ(hints, 4 * layers - 1);
}

INSTANTIATE_TEST_SUITE_P(PreNorms, PrefetchHints, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fused" : "Separate"; });

}  // namespace
}  // namespace xserv::model::testing
