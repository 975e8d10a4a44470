#include "common/flags.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

namespace xserv {
namespace {

std::optional<int> Parse(CLI::App& app, CommonFlags& flags, std::vector<const char*> args) {
  args.insert(args.begin(), "xserv-test");
  return ParseCommandLine(app, static_cast<int>(args.size()), args.data(), flags, "xserv-test");
}

TEST(Flags, DefaultsRunAndSetLevel) {
  CLI::App app;
  CommonFlags flags;
  AddCommonFlags(app, flags);
  EXPECT_EQ(Parse(app, flags, {}), std::nullopt);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
}

TEST(Flags, ExplicitLevelAndFormat) {
  CLI::App app;
  CommonFlags flags;
  AddCommonFlags(app, flags);
  EXPECT_EQ(Parse(app, flags, {"--log-level", "debug", "--log-format", "json"}), std::nullopt);
  EXPECT_EQ(flags.log_format, "json");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
}

TEST(Flags, EnvironmentProvidesLevel) {
  ::setenv("XSERV_LOG_LEVEL", "error", 1);
  CLI::App app;
  CommonFlags flags;
  AddCommonFlags(app, flags);
  EXPECT_EQ(Parse(app, flags, {}), std::nullopt);
  ::unsetenv("XSERV_LOG_LEVEL");
  EXPECT_EQ(flags.log_level, "error");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
}

TEST(Flags, BadValuesAndUnknownFlagsExitNonZero) {
  {
    CLI::App app;
    CommonFlags flags;
    AddCommonFlags(app, flags);
    auto code = Parse(app, flags, {"--log-level", "verbose"});
    ASSERT_TRUE(code.has_value());
    EXPECT_NE(*code, 0);
  }
  {
    CLI::App app;
    CommonFlags flags;
    AddCommonFlags(app, flags);
    auto code = Parse(app, flags, {"--no-such-flag"});
    ASSERT_TRUE(code.has_value());
    EXPECT_NE(*code, 0);
  }
}

TEST(Flags, VersionExitsZero) {
  CLI::App app;
  CommonFlags flags;
  AddCommonFlags(app, flags);
  testing::internal::CaptureStdout();
  auto code = Parse(app, flags, {"--version"});
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  EXPECT_NE(out.find("xserv "), std::string::npos);
}

}  // namespace
}  // namespace xserv
