#include "common/logging.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace xserv {
namespace {

std::string FormatJson(spdlog::level::level_enum level, std::string_view payload) {
  JsonLinesFormatter formatter;
  spdlog::details::log_msg msg("worker", level, spdlog::string_view_t(payload.data(), payload.size()));
  spdlog::memory_buf_t buf;
  formatter.format(msg, buf);
  return std::string(buf.data(), buf.size());
}

TEST(Logging, ParsesEveryLevelAndRejectsUnknown) {
  EXPECT_EQ(*ParseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLogLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(*ParseLogLevel("error"), spdlog::level::err);
  EXPECT_EQ(*ParseLogLevel("off"), spdlog::level::off);
  auto bad = ParseLogLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("loud"), std::string::npos);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
}

TEST(Logging, JsonLinesAreOneValidObjectPerLine) {
  const std::string line = FormatJson(spdlog::level::warn, "quote \" newline \n tab \t done");
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "embedded newline must be escaped";
  const auto parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["level"], "warning");
  EXPECT_EQ(parsed["logger"], "worker");
  EXPECT_EQ(parsed["msg"], "quote \" newline \n tab \t done");
  EXPECT_GT(parsed["ts"].get<double>(), 1.6e9);
}

TEST(Logging, JsonLinesSurviveInvalidUtf8) {
  const std::string line = FormatJson(spdlog::level::info, "bad \xff\xfe bytes");
  const auto parsed = nlohmann::json::parse(line);  // must not throw
  EXPECT_NE(parsed["msg"].get<std::string>().find("bytes"), std::string::npos);
}

TEST(Logging, InitRejectsBadLevelAndInstallsLogger) {
  EXPECT_FALSE(InitLogging({.level = "chatty"}).ok());
  ASSERT_TRUE(InitLogging({.level = "error", .process_name = "unit"}).ok());
  EXPECT_EQ(spdlog::default_logger()->name(), "unit");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  ASSERT_TRUE(InitLogging({.level = "info", .process_name = "unit2"}).ok());  // re-init works
  EXPECT_EQ(spdlog::default_logger()->name(), "unit2");
}

}  // namespace
}  // namespace xserv
