// Helpers shared by the worker/tools tests: scratch directories, file access, asset locations.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace xserv::tools::testing {

// A fresh directory under the test temp dir, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "xserv_tools_XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed for " << pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A real tokenizer fetched by scripts/fetch-assets.sh, or "" when absent (tests then skip).
inline std::string TokenizerDir(const std::string& name) {
  const std::string dir = std::string(XSERV_SOURCE_DIR) + "/.assets/tokenizers/" + name;
  std::error_code ec;
  return std::filesystem::exists(dir + "/tokenizer.json", ec) ? dir : "";
}

inline std::string TestModelDir(const std::string& name) {
  return std::string(XSERV_SOURCE_DIR) + "/tests/data/models/" + name;
}

}  // namespace xserv::tools::testing
