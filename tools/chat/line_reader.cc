#include "tools/chat/line_reader.h"

#include <cstdlib>
#include <iostream>

#ifdef XSERV_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace xserv::tools {

#ifdef XSERV_HAVE_LIBEDIT
constexpr bool kHaveLibedit = true;
#else
constexpr bool kHaveLibedit = false;
#endif

LineReader::LineReader(bool interactive)
    : interactive_(interactive), editing_(interactive && kHaveLibedit) {}

std::optional<std::string> LineReader::Read(const std::string& prompt) {
#ifdef XSERV_HAVE_LIBEDIT
  if (editing_) {
    char* raw = readline(prompt.c_str());
    if (raw == nullptr) return std::nullopt;
    std::string line(raw);
    std::free(raw);
    if (line.find_first_not_of(" \t") != std::string::npos) add_history(line.c_str());
    return line;
  }
#endif
  if (interactive_) std::cout << "\033[1m" << prompt << "\033[0m" << std::flush;
  std::string line;
  if (!std::getline(std::cin, line)) return std::nullopt;
  return line;
}

}  // namespace xserv::tools
