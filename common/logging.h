// Process-wide logging set-up on spdlog: human-readable text or JSON lines on stderr.
//
// Call InitLogging once from main() before any other thread starts; afterwards use spdlog's
// free functions (spdlog::info, ...) from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "spdlog/formatter.h"
#include "spdlog/spdlog.h"

namespace xserv {

enum class LogFormat { kText, kJson };

struct LoggingOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::kText;
  std::string process_name = "xserv";  // logger name, shown in every line
};

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(std::string_view level);
absl::StatusOr<LogFormat> ParseLogFormat(std::string_view format);

// Replaces the default logger with a stderr logger configured by `options`.
absl::Status InitLogging(const LoggingOptions& options);

// One JSON object per line: {"ts","level","logger","thread","msg"}; the message is escaped,
// so any bytes a client sent cannot break the line structure.
class JsonLinesFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace xserv
