// Reading checkpoints that HF transformers itself wrote (tests/data/models/, see its README):
// the reader must accept real files, and our writer's output of the same tensors must read back
// identically.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/safetensors/float_convert.h"
#include "common/safetensors/safetensors_model.h"
#include "common/safetensors/writer.h"
#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/safetensors/test_util.h"

namespace xserv::safetensors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ModelDir(const std::string& name) {
  return std::string(XSERV_TEST_DATA_DIR) + "/models/" + name;
}

SafetensorsModel OpenOrDie(const std::string& name) {
  absl::StatusOr<SafetensorsModel> model = SafetensorsModel::Open(ModelDir(name));
  EXPECT_TRUE(model.ok()) << model.status();
  XSERV_CHECK(model.ok());
  return std::move(model).value();
}

TEST(HfCheckpointsTest, EveryTinyModelOpens) {
  for (const char* name :
       {"gpt2-tiny", "qwen3-tiny", "qwen3-tiny-tied-bf16", "gpt-oss-tiny-mxfp4"}) {
    const SafetensorsModel model = OpenOrDie(name);
    EXPECT_EQ(model.layout(), CheckpointLayout::kSingleFile) << name;
    EXPECT_GT(model.num_tensors(), 0u) << name;
    EXPECT_EQ(model.files()[0].metadata().at("format"), "pt") << name;
  }
}

TEST(HfCheckpointsTest, ShardedLlama) {
  const SafetensorsModel model = OpenOrDie("llama3-tiny-sharded");
  EXPECT_EQ(model.layout(), CheckpointLayout::kIndexed);
  EXPECT_EQ(model.files().size(), 4u);
  EXPECT_EQ(model.TotalBytes(), 591104u);  // the index's metadata.total_size
  absl::StatusOr<TensorView> head = model.Tensor("lm_head.weight");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->dtype, DType::kF32);
  EXPECT_THAT(head->shape, ElementsAre(512, 64));
  EXPECT_THAT(model.FileOf("lm_head.weight")->path(), HasSubstr("model-00004-of-00004"));
}

TEST(HfCheckpointsTest, GptOssMxfp4Tensors) {
  const SafetensorsModel model = OpenOrDie("gpt-oss-tiny-mxfp4");
  absl::StatusOr<TensorView> blocks =
      model.Tensor("model.layers.0.mlp.experts.gate_up_proj_blocks");
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(blocks->dtype, DType::kU8);
  EXPECT_THAT(blocks->shape, ElementsAre(4, 192, 2, 16));
  absl::StatusOr<TensorView> sinks = model.Tensor("model.layers.0.self_attn.sinks");
  ASSERT_TRUE(sinks.ok());
  EXPECT_EQ(sinks->dtype, DType::kBF16);
  std::vector<float> values(4);
  ASSERT_TRUE(ConvertToFloat(sinks->dtype, sinks->data, values).ok());
  for (float v : values) EXPECT_TRUE(std::isfinite(v));
}

TEST(HfCheckpointsTest, RewriteReadsBackIdentically) {
  testing::TempDir dir;
  for (const char* name : {"qwen3-tiny-tied-bf16", "llama3-tiny-sharded"}) {
    const SafetensorsModel model = OpenOrDie(name);
    std::vector<TensorView> views;
    for (const std::string& tensor : model.TensorNames()) {
      views.push_back(*model.Tensor(tensor));
    }
    const std::string path = dir.File(std::string(name) + ".safetensors");
    ASSERT_TRUE(WriteSafetensors(path, views, {{"format", "pt"}}).ok());
    absl::StatusOr<SafetensorsFile> copy = SafetensorsFile::Open(path);
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_EQ(copy->num_tensors(), views.size());
    for (const TensorView& original : views) {
      absl::StatusOr<TensorView> reread = copy->Tensor(original.name);
      ASSERT_TRUE(reread.ok());
      EXPECT_EQ(reread->dtype, original.dtype);
      EXPECT_EQ(reread->shape, original.shape);
      ASSERT_EQ(reread->data.size(), original.data.size());
      EXPECT_EQ(std::memcmp(reread->data.data(), original.data.data(), original.data.size()), 0)
          << original.name;
    }
  }
}

}  // namespace
}  // namespace xserv::safetensors
