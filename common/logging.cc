#include "common/logging.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_sinks.h"

namespace xserv {

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(std::string_view level) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off},
  };
  for (const auto& [name, value] : kLevels) {
    if (name == level) return value;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", std::string(level), "' (use trace, debug, info, warn, error, critical, off)"));
}

absl::StatusOr<LogFormat> ParseLogFormat(std::string_view format) {
  if (format == "text") return LogFormat::kText;
  if (format == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format '", std::string(format), "' (use text or json)"));
}

absl::Status InitLogging(const LoggingOptions& options) {
  auto level = ParseLogLevel(options.level);
  if (!level.ok()) return level.status();
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto named = std::make_shared<spdlog::logger>(options.process_name, std::move(sink));
  if (options.format == LogFormat::kJson) {
    named->set_formatter(std::make_unique<JsonLinesFormatter>());
  } else {
    named->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v");
  }
  named->set_level(*level);
  named->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(named));
  return absl::OkStatus();
}

void JsonLinesFormatter::format(const spdlog::details::log_msg& msg,
                                spdlog::memory_buf_t& dest) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch()).count();
  nlohmann::json line = {
      {"ts", static_cast<double>(micros) / 1e6},
      {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                            spdlog::level::to_string_view(msg.level).size())},
      {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
      {"thread", msg.thread_id},
      {"msg", std::string(msg.payload.data(), msg.payload.size())},
  };
  // `replace` keeps invalid UTF-8 from a client from throwing inside the logger.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dest.append(text.data(), text.data() + text.size());
  dest.push_back('\n');
}

std::unique_ptr<spdlog::formatter> JsonLinesFormatter::clone() const {
  return std::make_unique<JsonLinesFormatter>();
}

}  // namespace xserv
