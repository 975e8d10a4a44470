// Malformed and hostile safetensors files and indexes: each must yield an error naming the file
// (and the tensor where one is at fault), never a crash.
#include <cstring>
#include <string>
#include <vector>

#include "common/safetensors/index_json.h"
#include "common/safetensors/safetensors_file.h"
#include "common/safetensors/safetensors_model.h"
#include "common/safetensors/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/safetensors/test_util.h"

namespace xserv::safetensors {
namespace {

using ::testing::HasSubstr;
using testing::MakeImage;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

class HostileFileTest : public ::testing::Test {
 protected:
  // Writes `image` and opens it; the error must name the file.
  absl::Status OpenImage(const std::vector<std::byte>& image) {
    const std::string path = dir_.File("hostile.safetensors");
    WriteBytes(path, image);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (file.ok()) return absl::OkStatus();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
    return file.status();
  }

  TempDir dir_;
};

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST_F(HostileFileTest, ValidBaselineOpens) {
  EXPECT_TRUE(
      OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)).ok());
}

TEST_F(HostileFileTest, TruncatedFile) {
  for (size_t size : {0, 1, 7}) {
    std::vector<std::byte> image(size, std::byte{0});
    const absl::Status status = OpenImage(image);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << size;
  }
  // Header intact, data cut short.
  const absl::Status status =
      OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 5));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
}

TEST_F(HostileFileTest, HeaderLengthLargerThanFile) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  absl::Status status = OpenImage(MakeImage(header, 1, header.size() + 100));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("header length"));
  status = OpenImage(MakeImage(header, 1, uint64_t{1} << 62));
  EXPECT_FALSE(status.ok());
  status = OpenImage(MakeImage(header, 1, ~uint64_t{0} - 1));
  EXPECT_FALSE(status.ok());
}

TEST_F(HostileFileTest, HeaderNotJsonOrNotObject) {
  for (const char* header : {"{not json", "[1,2,3]", "\"str\"", "", "   {}", "{}\x01", "{\"a\":}",
                             "{\"w\":\"F32\"}", "{\"w\":null}", "{\"w\":[]}"}) {
    const absl::Status status = OpenImage(MakeImage(header, 0));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << header;
  }
  // Invalid UTF-8 inside a JSON string.
  const absl::Status status = OpenImage(MakeImage("{\"\xff\xfe\":1}", 0));
  EXPECT_FALSE(status.ok());
}

TEST_F(HostileFileTest, MissingFields) {
  absl::Status status = OpenImage(MakeImage(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  EXPECT_THAT(Message(status), HasSubstr("dtype"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("shape"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[1]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("data_offsets"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("data_offsets"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("data_offsets"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("shape"));
}

TEST_F(HostileFileTest, BadDType) {
  const absl::Status status =
      OpenImage(MakeImage(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  EXPECT_THAT(Message(status), HasSubstr("F128"));
  EXPECT_FALSE(
      OpenImage(MakeImage(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1)).ok());
}

TEST_F(HostileFileTest, ShapeOffsetSizeMismatch) {
  const absl::Status status =
      OpenImage(MakeImage(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  EXPECT_THAT(Message(status), HasSubstr("12 bytes"));
}

TEST_F(HostileFileTest, OverlappingRanges) {
  const absl::Status status =
      OpenImage(MakeImage(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                          12));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("overlap"));
  EXPECT_THAT(Message(status), HasSubstr("\"b\""));
  EXPECT_THAT(Message(status), HasSubstr("\"a\""));
  // Two tensors aliasing the same bytes.
  EXPECT_FALSE(OpenImage(MakeImage(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                                   4))
                   .ok());
}

TEST_F(HostileFileTest, GapsAndTrailingBytes) {
  absl::Status status =
      OpenImage(MakeImage(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                          10));
  EXPECT_THAT(Message(status), HasSubstr("gap"));
  status = OpenImage(MakeImage(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9));
  EXPECT_THAT(Message(status), HasSubstr("cover"));
}

TEST_F(HostileFileTest, OffsetsPastEndOrBackwards) {
  absl::Status status =
      OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})", 10));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(
      MakeImage(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", 1));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("end"));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 1));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0.0,1.0]}})", 1));
  EXPECT_FALSE(status.ok());
}

TEST_F(HostileFileTest, NegativeAndNonIntegerDims) {
  absl::Status status =
      OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[-2,-2],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("negative"));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":[2.5],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(MakeImage(R"({"w":{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
}

TEST_F(HostileFileTest, HugeDimsOverflow) {
  // 2^32 * 2^32 overflows int64; so does 2^62 elements of 4 bytes.
  absl::Status status = OpenImage(
      MakeImage(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT(Message(status), HasSubstr("overflow"));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  status = OpenImage(
      MakeImage(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT(Message(status), HasSubstr("overflow"));
  status = OpenImage(
      MakeImage(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT(Message(status), HasSubstr("\"w\""));
  // A zero dim makes any other dim harmless.
  EXPECT_TRUE(
      OpenImage(
          MakeImage(R"({"w":{"dtype":"U8","shape":[0,9223372036854775807],"data_offsets":[0,0]}})",
                    0))
          .ok());
}

TEST_F(HostileFileTest, Metadata) {
  EXPECT_TRUE(OpenImage(MakeImage(R"({"__metadata__":{"format":"pt"}})", 0)).ok());
  EXPECT_TRUE(OpenImage(MakeImage(R"({"__metadata__":null})", 0)).ok());
  absl::Status status = OpenImage(MakeImage(R"({"__metadata__":{"n":1}})", 0));
  EXPECT_THAT(Message(status), HasSubstr("__metadata__"));
  status = OpenImage(MakeImage(R"({"__metadata__":[1]})", 0));
  EXPECT_THAT(Message(status), HasSubstr("__metadata__"));
}

TEST_F(HostileFileTest, NotARegularFile) {
  EXPECT_FALSE(SafetensorsFile::Open(dir_.path().string()).ok());
  EXPECT_EQ(SafetensorsFile::Open(dir_.File("missing.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
}

class HostileIndexTest : public ::testing::Test {
 protected:
  void WriteShard(const std::string& file, const std::string& tensor) {
    const std::vector<std::byte> data(4, std::byte{1});
    const TensorView view{.name = tensor, .dtype = DType::kF32, .shape = {1}, .data = data};
    ASSERT_TRUE(WriteSafetensors(dir_.File(file), {&view, 1}).ok());
  }
  void WriteIndex(const std::string& text) {
    WriteText(dir_.File(std::string(kIndexFileName)), text);
  }
  absl::Status Open() { return SafetensorsModel::Open(dir_.path().string()).status(); }

  TempDir dir_;
};

TEST_F(HostileIndexTest, MissingShard) {
  WriteShard("s1.safetensors", "a");
  WriteIndex(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  const absl::Status status = Open();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status), HasSubstr("s2.safetensors"));
  EXPECT_THAT(Message(status), HasSubstr("\"b\""));
}

TEST_F(HostileIndexTest, ShardLacksTensor) {
  WriteShard("s1.safetensors", "a");
  WriteIndex(R"({"weight_map":{"a":"s1.safetensors","ghost":"s1.safetensors"}})");
  const absl::Status status = Open();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr("\"ghost\""));
  EXPECT_THAT(Message(status), HasSubstr("s1.safetensors"));
}

TEST_F(HostileIndexTest, MalformedIndex) {
  WriteShard("s1.safetensors", "a");
  for (const char* text :
       {"", "{", "[]", R"({"metadata":{}})", R"({"weight_map":[]})", R"({"weight_map":{"a":1}})"}) {
    WriteIndex(text);
    const absl::Status status = Open();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(Message(status), HasSubstr(std::string(kIndexFileName))) << text;
  }
}

TEST_F(HostileIndexTest, ShardOutsideDirectoryIsRefused) {
  WriteShard("s1.safetensors", "a");
  for (const char* text : {R"({"weight_map":{"a":"../s1.safetensors"}})",
                           R"({"weight_map":{"a":"/etc/passwd"}})", R"({"weight_map":{"a":""}})"}) {
    WriteIndex(text);
    const absl::Status status = Open();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(Message(status), HasSubstr("\"a\"")) << text;
  }
}

TEST_F(HostileIndexTest, CorruptShardNamesShard) {
  WriteShard("s1.safetensors", "a");
  WriteBytes(dir_.File("s2.safetensors"), MakeImage("{garbage", 0));
  WriteIndex(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  const absl::Status status = Open();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr("s2.safetensors"));
}

}  // namespace
}  // namespace xserv::safetensors
