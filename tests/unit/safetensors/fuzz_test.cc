// Random byte mutations of a valid file must never crash the parser: errors are fine, and when a
// mutant parses, every tensor it exposes must lie inside the file.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/safetensors/header.h"
#include "common/safetensors/safetensors_file.h"
#include "common/safetensors/writer.h"
#include "gtest/gtest.h"
#include "tests/unit/safetensors/test_util.h"

namespace xserv::safetensors {
namespace {

using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

std::vector<std::byte> ValidImage(const TempDir& dir) {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorView> views;
  const std::vector<std::pair<DType, std::vector<int64_t>>> specs = {{DType::kBF16, {4, 3}},
                                                                     {DType::kF32, {2}},
                                                                     {DType::kU8, {}},
                                                                     {DType::kI64, {0, 5}},
                                                                     {DType::kF8E4M3, {7}}};
  buffers.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : specs[i].second) n *= d;
    buffers.emplace_back(static_cast<size_t>(n) * DTypeSize(specs[i].first), std::byte{0x5A});
    std::string name = "t";
    name += std::to_string(i);  // not "t" + ...: GCC 12 raises a false -Wrestrict on that
    views.push_back(
        {.name = name, .dtype = specs[i].first, .shape = specs[i].second, .data = buffers.back()});
  }
  const std::string path = dir.File("valid.safetensors");
  EXPECT_TRUE(WriteSafetensors(path, views, {{"format", "pt"}}).ok());
  return ReadBytes(path);
}

// Applies 1-4 random edits, mostly inside the 8-byte length and the header where they matter.
void Mutate(std::mt19937_64& rng, std::vector<std::byte>& bytes, size_t header_end) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const bool in_header = rng() % 5 != 0;
    const size_t limit = in_header ? std::min(header_end, bytes.size()) : bytes.size();
    const size_t pos = rng() % limit;
    switch (rng() % 6) {
      case 0:  // random byte
        bytes[pos] = static_cast<std::byte>(rng());
        break;
      case 1:  // bit flip
        bytes[pos] ^= static_cast<std::byte>(1u << (rng() % 8));
        break;
      case 2:  // JSON-significant character
        bytes[pos] = static_cast<std::byte>("{}[]\",:-0123456789e. "[rng() % 21]);
        break;
      case 3:  // truncate
        bytes.resize(pos);
        break;
      case 4:  // delete one byte
        bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(pos));
        break;
      case 5:  // insert one byte
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(pos),
                     static_cast<std::byte>(rng()));
        break;
    }
  }
}

// Reads every byte a parsed layout claims, so an out-of-range claim would show up as a crash
// (or under ASan as an error) rather than pass silently.
void CheckLayoutInBounds(const FileLayout& layout, std::span<const std::byte> bytes) {
  unsigned checksum = 0;
  for (const TensorEntry& entry : layout.tensors) {
    ASSERT_LE(entry.begin, entry.end);
    ASSERT_LE(layout.data_start + entry.end, bytes.size());
    for (uint64_t i = entry.begin; i < entry.end; ++i) {
      checksum += static_cast<unsigned>(bytes[layout.data_start + i]);
    }
  }
  (void)checksum;
}

TEST(SafetensorsFuzzTest, RandomMutationsInMemoryNeverCrash) {
  TempDir dir;
  const std::vector<std::byte> valid = ValidImage(dir);
  uint64_t header_len = 0;
  std::memcpy(&header_len, valid.data(), 8);
  std::mt19937_64 rng(20240601);
  int parsed = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::byte> mutant = valid;
    Mutate(rng, mutant, 8 + header_len);
    absl::StatusOr<FileLayout> layout = ParseFileLayout(mutant, "mutant");
    if (layout.ok()) {
      ++parsed;
      CheckLayoutInBounds(*layout, mutant);
    } else {
      EXPECT_NE(std::string(layout.status().message()).find("mutant"), std::string::npos)
          << layout.status();
    }
  }
  // Some mutants (e.g. edits in the data section) stay valid; most do not.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 5000);
}

TEST(SafetensorsFuzzTest, RandomMutationsThroughFilesNeverCrash) {
  TempDir dir;
  const std::vector<std::byte> valid = ValidImage(dir);
  uint64_t header_len = 0;
  std::memcpy(&header_len, valid.data(), 8);
  std::mt19937_64 rng(7);
  const std::string path = dir.File("mutant.safetensors");
  for (int i = 0; i < 300; ++i) {
    std::vector<std::byte> mutant = valid;
    Mutate(rng, mutant, 8 + header_len);
    WriteBytes(path, mutant);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok()) continue;
    for (const std::string& name : file->TensorNames()) {
      absl::StatusOr<TensorView> view = file->Tensor(name);
      ASSERT_TRUE(view.ok());
      unsigned sum = 0;
      for (std::byte b : view->data) sum += static_cast<unsigned>(b);
      (void)sum;
    }
  }
}

}  // namespace
}  // namespace xserv::safetensors
