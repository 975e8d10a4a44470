// Locates and reads the committed config fixtures in tests/data/model_config/.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace xserv::testing {

inline std::string ModelConfigDataPath(const std::string& name) {
  return std::string(XSERV_TEST_DATA_DIR) + "/model_config/" + name;
}

inline std::string ReadModelConfigData(const std::string& name) {
  std::ifstream in(ModelConfigDataPath(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << ModelConfigDataPath(name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace xserv::testing
