// The command-line convention shared by every xserv binary (CLI11): --log-level (env
// XSERV_LOG_LEVEL), --log-format (env XSERV_LOG_FORMAT) and --version.
//
// Usage in main():
//   CLI::App app{"what this binary does"};
//   xserv::CommonFlags common;
//   xserv::AddCommonFlags(app, common);
//   ... app.add_option(...) ...
//   if (auto exit_code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-foo"))
//     return *exit_code;
// Environment variables are read only here, during parsing in main().
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace xserv {

struct CommonFlags {
  std::string log_level = "info";
  std::string log_format = "text";
};

void AddCommonFlags(CLI::App& app, CommonFlags& flags);

// A number in [min, max]. Unlike CLI::Range, it refuses NaN ("nan" parses as a double and passes
// both of Range's comparisons), so durations and sizes cast to integers later stay defined.
CLI::Validator NumberIn(double min, double max);

// Parses argv and initialises logging. Returns an exit code when the program should stop now
// (--help, --version, a usage error), std::nullopt when it should run.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv,
                                    const CommonFlags& flags, const std::string& process_name);

}  // namespace xserv
