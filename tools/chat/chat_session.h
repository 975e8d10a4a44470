// The conversation state of xserv-chat, apart from any I/O: the message history, the system
// prompt, and what a typed line means (a command or a user turn). Pure logic, unit-tested.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace xserv::tools {

class ChatSession {
 public:
  enum class Action { kSend, kCleared, kSystemSet, kExit, kHelp, kNothing, kUnknownCommand };

  explicit ChatSession(std::string system = "") : system_(std::move(system)) {}

  // Interprets one typed line: "/clear", "/system TEXT" (empty TEXT removes it), "/exit" or
  // "/quit", "/help"; anything else that is not blank is a user turn (kSend, appended).
  Action HandleLine(const std::string& line);

  // The conversation as OpenAI messages: the system prompt (when set), then the history.
  nlohmann::json Messages() const;
  // The request body for the next answer (messages = system + history).
  nlohmann::json Request(const std::string& model, int max_tokens, double temperature) const;
  // Records the assistant's answer so the next turn carries it.
  void AddAnswer(const std::string& content);
  // Drops the user turn that got no answer (the request failed).
  void DropUnanswered();

  size_t num_messages() const { return history_.size(); }

 private:
  std::string system_;
  std::vector<std::pair<std::string, std::string>> history_;  // (role, content)
};

}  // namespace xserv::tools
