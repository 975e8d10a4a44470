#include "tools/chat/chat_session.h"

namespace xserv::tools {
namespace {

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

ChatSession::Action ChatSession::HandleLine(const std::string& raw) {
  const std::string line = Trim(raw);
  if (line.empty()) return Action::kNothing;
  if (line[0] != '/') {
    history_.emplace_back("user", line);
    return Action::kSend;
  }
  const size_t space = line.find(' ');
  const std::string command = line.substr(0, space);
  const std::string argument = space == std::string::npos ? "" : Trim(line.substr(space + 1));
  if (command == "/exit" || command == "/quit") return Action::kExit;
  if (command == "/clear") {
    history_.clear();
    return Action::kCleared;
  }
  if (command == "/system") {
    system_ = argument;
    return Action::kSystemSet;
  }
  if (command == "/help") return Action::kHelp;
  return Action::kUnknownCommand;
}

nlohmann::json ChatSession::Messages() const {
  nlohmann::json messages = nlohmann::json::array();
  if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
  for (const auto& [role, content] : history_) {
    messages.push_back({{"role", role}, {"content", content}});
  }
  return messages;
}

nlohmann::json ChatSession::Request(const std::string& model, int max_tokens,
                                    double temperature) const {
  nlohmann::json request = {{"messages", Messages()},
                            {"stream", true},
                            {"stream_options", {{"include_usage", true}}},
                            {"max_tokens", max_tokens},
                            {"temperature", temperature}};
  if (!model.empty()) request["model"] = model;
  return request;
}

void ChatSession::AddAnswer(const std::string& content) {
  history_.emplace_back("assistant", content);
}

void ChatSession::DropUnanswered() {
  if (!history_.empty() && history_.back().first == "user") history_.pop_back();
}

}  // namespace xserv::tools
