#include <algorithm>
#include <iostream>

#include "tools/chat/chat_backend.h"

namespace xserv::tools {

void AnswerPrinter::Reasoning(std::string_view text) {
  if (!think_ || text.empty()) return;
  if (!in_reasoning_ && colour_) std::cout << "\033[90m";
  in_reasoning_ = true;
  std::cout << text << std::flush;
}

void AnswerPrinter::Content(std::string_view text) {
  if (!content_started_) {  // the blank lines between reasoning and answer
    const size_t begin = text.find_first_not_of('\n');
    text.remove_prefix(begin == std::string_view::npos ? text.size() : begin);
  }
  if (text.empty()) return;
  if (in_reasoning_) std::cout << (colour_ ? "\033[0m\n" : "\n");
  in_reasoning_ = false;
  content_started_ = true;
  std::cout << text << std::flush;
}

void AnswerPrinter::End() {
  if (in_reasoning_ && colour_) std::cout << "\033[0m";
  in_reasoning_ = false;
}

double Answer::TokensPerSecond() const {
  const double gen_s = seconds - std::max(0.0, first_token_s);
  return gen_s > 0 && completion_tokens > 1 ? (completion_tokens - 1) / gen_s : 0.0;
}

}  // namespace xserv::tools
