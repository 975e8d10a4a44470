#include "common/flags.h"

#include <cstdio>

#include "common/logging.h"
#include "common/version.h"

namespace xserv {

void AddCommonFlags(CLI::App& app, CommonFlags& flags) {
  app.add_option("--log-level", flags.log_level,
                 "trace, debug, info, warn, error, critical or off")
      ->envname("XSERV_LOG_LEVEL")
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format, "text or json (one JSON object per line)")
      ->envname("XSERV_LOG_FORMAT")
      ->capture_default_str();
  app.set_version_flag("--version", VersionString());
}

CLI::Validator NumberIn(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !(value >= min && value <= max)) {
          return "must be a number in [" + CLI::detail::to_string(min) + ", " +
                 CLI::detail::to_string(max) + "], got " + text;
        }
        return "";
      },
      "NUMBER in [" + CLI::detail::to_string(min) + " - " + CLI::detail::to_string(max) + "]");
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv,
                                    const CommonFlags& flags, const std::string& process_name) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help / version / the usage error; 0 for help and version
  }
  LoggingOptions options{.level = flags.log_level, .process_name = process_name};
  auto format = ParseLogFormat(flags.log_format);
  if (!format.ok()) {
    std::fprintf(stderr, "%s: %s\n", process_name.c_str(), format.status().ToString().c_str());
    return 2;
  }
  options.format = *format;
  if (auto status = InitLogging(options); !status.ok()) {
    std::fprintf(stderr, "%s: %s\n", process_name.c_str(), status.ToString().c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace xserv
