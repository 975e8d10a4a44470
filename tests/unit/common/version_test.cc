#include "common/version.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace xserv {
namespace {

TEST(Version, CarriesCommitAndOptions) {
  const BuildInfo& info = GetBuildInfo();
  EXPECT_STREQ(info.version, "0.1.0");
  // Built from a git checkout: a 40-hex commit. "unknown" only outside git (e.g. a tarball).
  const std::string commit = info.git_commit;
  EXPECT_TRUE(commit == "unknown" || commit.size() == 40) << commit;
  const std::string text = VersionString();
  EXPECT_EQ(text.rfind("xserv 0.1.0 (commit ", 0), 0u) << text;
  EXPECT_NE(text.find(info.cuda_enabled ? "cuda on" : "cuda off"), std::string::npos);
  EXPECT_GT(std::strlen(info.compiler), 0u);
}

}  // namespace
}  // namespace xserv
