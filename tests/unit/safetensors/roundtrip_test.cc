// Writer -> reader round trips, header layout as HF's safetensors writes it, and the three
// checkpoint directory layouts.
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "common/safetensors/dtype.h"
#include "common/safetensors/index_json.h"
#include "common/safetensors/safetensors_file.h"
#include "common/safetensors/safetensors_model.h"
#include "common/safetensors/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/safetensors/test_util.h"

namespace xserv::safetensors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadBytes;
using testing::TempDir;

// Owns the bytes of tensors built for a test.
struct TensorSet {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorView> views;

  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<std::byte> bytes(static_cast<size_t>(n) * DTypeSize(dtype));
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<std::byte>((i * 31 + name.size() * 7 + 3) & 0xFF);
    }
    buffers.push_back(std::move(bytes));
    views.push_back({.name = name, .dtype = dtype, .shape = std::move(shape), .data = {}});
    // Re-point every view: push_back may have moved the buffers.
    for (size_t i = 0; i < views.size(); ++i) views[i].data = buffers[i];
  }
};

void ExpectSameTensor(const TensorView& actual, const TensorView& expected) {
  EXPECT_EQ(actual.name, expected.name);
  EXPECT_EQ(actual.dtype, expected.dtype) << actual.name;
  EXPECT_EQ(actual.shape, expected.shape) << actual.name;
  ASSERT_EQ(actual.data.size(), expected.data.size()) << actual.name;
  EXPECT_EQ(std::memcmp(actual.data.data(), expected.data.data(), actual.data.size()), 0)
      << actual.name;
}

TEST(SafetensorsRoundTripTest, EveryDTypeAndShape) {
  TempDir dir;
  TensorSet set;
  for (DType dtype : kAllDTypes) {
    const std::string base(DTypeName(dtype));
    set.Add(base + ".matrix", dtype, {3, 5});
    set.Add(base + ".scalar", dtype, {});
    set.Add(base + ".empty", dtype, {0, 4});
    set.Add(base + ".cube", dtype, {2, 1, 3});
  }
  const std::string path = dir.File("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, set.views, {{"format", "pt"}}).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->num_tensors(), set.views.size());
  EXPECT_EQ(file->metadata().at("format"), "pt");
  for (const TensorView& expected : set.views) {
    absl::StatusOr<TensorView> actual = file->Tensor(expected.name);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectSameTensor(*actual, expected);
  }
  absl::StatusOr<TensorView> scalar = file->Tensor("F32.scalar");
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->NumElements(), 1);
  EXPECT_EQ(scalar->data.size(), 4u);
}

TEST(SafetensorsRoundTripTest, HeaderIsSpacePaddedToEightBytesInGivenOrder) {
  TempDir dir;
  TensorSet set;
  set.Add("b", DType::kU8, {3});  // odd sizes, so any missing padding would show
  set.Add("a", DType::kBF16, {1});
  const std::string path = dir.File("x.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, set.views).ok());
  const std::vector<std::byte> bytes = ReadBytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  EXPECT_EQ(header.front(), '{');
  const size_t last_brace = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', last_brace + 1), std::string::npos);
  EXPECT_LT(header.size() - last_brace - 1, 8u);
  // Tensors in the order given, contiguous from offset 0.
  EXPECT_LT(header.find("\"b\""), header.find("\"a\""));
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json::array({0, 3}));
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json::array({3, 5}));
  EXPECT_EQ(json["a"]["dtype"], "BF16");
  EXPECT_FALSE(json.contains("__metadata__"));  // omitted when empty
  EXPECT_EQ(bytes.size(), 8 + header_len + 5);
}

TEST(SafetensorsRoundTripTest, EmptyFileRoundTrips) {
  TempDir dir;
  const std::string path = dir.File("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->num_tensors(), 0u);
  EXPECT_EQ(file->data_bytes(), 0u);
}

TEST(SafetensorsRoundTripTest, WriterRejectsBadInput) {
  TempDir dir;
  TensorSet set;
  set.Add("w", DType::kF32, {2, 2});
  std::vector<TensorView> views = set.views;
  views[0].shape = {3, 2};
  absl::Status status = WriteSafetensors(dir.File("bad.safetensors"), views);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"w\""));

  views = {set.views[0], set.views[0]};
  EXPECT_THAT(std::string(WriteSafetensors(dir.File("dup.safetensors"), views).message()),
              HasSubstr("twice"));
  views = set.views;
  views[0].name = "__metadata__";
  EXPECT_FALSE(WriteSafetensors(dir.File("meta.safetensors"), views).ok());
  views[0].name = "w";
  views[0].shape = {-1, -4};
  EXPECT_FALSE(WriteSafetensors(dir.File("neg.safetensors"), views).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("bad.safetensors")));
}

TEST(SafetensorsModelTest, SingleFile) {
  TempDir dir;
  TensorSet set;
  set.Add("model.embed_tokens.weight", DType::kBF16, {8, 4});
  set.Add("model.norm.weight", DType::kF32, {4});
  ASSERT_TRUE(WriteSafetensors(dir.File("model.safetensors"), set.views).ok());
  absl::StatusOr<SafetensorsModel> model = SafetensorsModel::Open(dir.path().string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->layout(), CheckpointLayout::kSingleFile);
  EXPECT_THAT(model->TensorNames(), ElementsAre("model.embed_tokens.weight", "model.norm.weight"));
  EXPECT_EQ(model->TotalBytes(), 8u * 4 * 2 + 4 * 4);
  absl::StatusOr<TensorView> norm = model->Tensor("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  ExpectSameTensor(*norm, set.views[1]);
  absl::StatusOr<TensorView> missing = model->Tensor("lm_head.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("lm_head.weight"));
}

TEST(SafetensorsModelTest, ShardedWithIndex) {
  TempDir dir;
  TensorSet set;
  for (int i = 0; i < 7; ++i) set.Add("layer." + std::to_string(i), DType::kF32, {4, 4});
  ShardedWriteOptions options;
  options.max_shard_bytes = 3 * 64;  // three 64-byte tensors per shard
  absl::StatusOr<std::vector<std::string>> shards =
      WriteShardedSafetensors(dir.path().string(), set.views, {{"format", "pt"}}, options);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards,
              ElementsAre("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                          "model-00003-of-00003.safetensors"));
  const std::vector<std::byte> index_bytes = ReadBytes(dir.File(std::string(kIndexFileName)));
  const std::string index_text(reinterpret_cast<const char*>(index_bytes.data()),
                               index_bytes.size());
  absl::StatusOr<ShardIndex> index = ParseShardIndex(index_text, "index");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->total_size, 7u * 64);
  EXPECT_EQ(index->weight_map.at("layer.4"), "model-00002-of-00003.safetensors");

  absl::StatusOr<SafetensorsModel> model = SafetensorsModel::Open(dir.path().string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->layout(), CheckpointLayout::kIndexed);
  EXPECT_EQ(model->files().size(), 3u);
  EXPECT_EQ(model->num_tensors(), 7u);
  EXPECT_EQ(model->TotalBytes(), 7u * 64);
  for (const TensorView& expected : set.views) {
    absl::StatusOr<TensorView> actual = model->Tensor(expected.name);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectSameTensor(*actual, expected);
  }
  EXPECT_THAT(model->FileOf("layer.6")->path(), HasSubstr("model-00003-of-00003"));
}

TEST(SafetensorsModelTest, OversizedTensorGetsItsOwnShard) {
  TempDir dir;
  TensorSet set;
  set.Add("small", DType::kU8, {4});
  set.Add("big", DType::kU8, {100});
  set.Add("tail", DType::kU8, {4});
  ShardedWriteOptions options;
  options.max_shard_bytes = 16;
  absl::StatusOr<std::vector<std::string>> shards =
      WriteShardedSafetensors(dir.path().string(), set.views, {}, options);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(shards->size(), 3u);
  ASSERT_TRUE(SafetensorsModel::Open(dir.path().string()).ok());
}

TEST(SafetensorsModelTest, FallsBackToAllFilesSorted) {
  TempDir dir;
  TensorSet a, b;
  a.Add("x", DType::kF16, {2});
  b.Add("y", DType::kI64, {1});
  ASSERT_TRUE(WriteSafetensors(dir.File("b-part.safetensors"), b.views).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("a-part.safetensors"), a.views).ok());
  testing::WriteText(dir.File("notes.txt"), "not a checkpoint");
  absl::StatusOr<SafetensorsModel> model = SafetensorsModel::Open(dir.path().string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->layout(), CheckpointLayout::kAllFiles);
  ASSERT_EQ(model->files().size(), 2u);
  EXPECT_THAT(model->files()[0].path(), HasSubstr("a-part"));
  EXPECT_THAT(model->TensorNames(), ElementsAre("x", "y"));
}

TEST(SafetensorsModelTest, DuplicateTensorAcrossFilesIsError) {
  TempDir dir;
  TensorSet a;
  a.Add("x", DType::kF16, {2});
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), a.views).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), a.views).ok());
  absl::StatusOr<SafetensorsModel> model = SafetensorsModel::Open(dir.path().string());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("\"x\""));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("b.safetensors"));
}

TEST(SafetensorsModelTest, EmptyOrMissingDirectory) {
  TempDir dir;
  EXPECT_EQ(SafetensorsModel::Open(dir.path().string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SafetensorsModel::Open(dir.File("nope")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace xserv::safetensors
