// How xserv-chat reads the user's lines. On a terminal, built with libedit (XSERV_HAVE_LIBEDIT):
// line editing with UTF-8-aware cursor movement (the locale's LC_CTYPE must be set first) and a
// history of the session's lines. Otherwise std::getline: pipes and files are read as they are,
// and a terminal falls back to its own canonical-mode editing. One reader per process, main thread.
#pragma once

#include <optional>
#include <string>

namespace xserv::tools {

class LineReader {
 public:
  // `interactive`: stdin and stdout are terminals (prompts are shown).
  explicit LineReader(bool interactive);

  // The next line without its newline; nullopt at the end of input.
  std::optional<std::string> Read(const std::string& prompt);

  // Whether lines are edited with libedit.
  bool editing() const { return editing_; }

 private:
  const bool interactive_;
  const bool editing_;
};

}  // namespace xserv::tools
