// xserv-chat: a terminal chat client for any OpenAI-compatible server (HTTP, streaming SSE).
// Multi-turn history; /clear, /system TEXT, /exit, /help; --think shows reasoning (Qwen3
// <think>, gpt-oss analysis) in grey; after each answer, the prompt and generated token counts
// and the generation speed. Lines are read with the terminal's own line editing (UTF-8 aware in
// canonical mode); when stdin or stdout is not a terminal there are no colours or prompts, so
// it can be scripted.
//
//   xserv-chat [--url http://127.0.0.1:8080] [--system TEXT] [--think] [--max-tokens 1024]
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tools/chat/chat_session.h"
#include "tools/common/http_client.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string url = "http://127.0.0.1:8080";
  std::string system, api_key, model;
  bool think = false;
  int max_tokens = 1024;
  double temperature = 0.7;
  int timeout_s = 300;
};

struct Answer {
  std::string content;
  int prompt_tokens = 0, completion_tokens = 0;
  double seconds = 0;            // from the request to the last event
  double first_token_s = -1;     // to the first content or reasoning delta
  std::string error;             // server or transport error, if any
};

Answer Ask(const Flags& f, const xserv::tools::HttpEndpoint& endpoint, const Json& request,
           bool colour) {
  Answer a;
  xserv::tools::SseReader sse;
  std::string error_body;
  bool in_reasoning = false;
  const auto start = Clock::now();
  auto on_body = [&](int status, std::string_view bytes) {
    if (status != 200) {
      error_body.append(bytes);
      return true;
    }
    for (const std::string& data : sse.Feed(bytes)) {
      if (data == "[DONE]") return false;
      const Json event = Json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (event.is_discarded()) continue;
      if (event.contains("error")) {
        a.error = event["error"].value("message", data);
        continue;
      }
      if (event.contains("usage") && event["usage"].is_object()) {
        a.prompt_tokens = event["usage"].value("prompt_tokens", 0);
        a.completion_tokens = event["usage"].value("completion_tokens", 0);
      }
      if (!event.contains("choices") || event["choices"].empty()) continue;
      const Json& delta = event["choices"][0]["delta"];
      const std::string reasoning = delta.value("reasoning_content", "");
      const std::string content = delta.value("content", "");
      if ((!reasoning.empty() || !content.empty()) && a.first_token_s < 0) {
        a.first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
      }
      if (!reasoning.empty() && f.think) {
        if (!in_reasoning && colour) std::cout << "\033[90m";
        in_reasoning = true;
        std::cout << reasoning << std::flush;
      }
      if (!content.empty()) {
        if (in_reasoning) std::cout << (colour ? "\033[0m\n" : "\n");
        in_reasoning = false;
        a.content += content;
        std::cout << content << std::flush;
      }
    }
    return true;
  };
  auto response = xserv::tools::PostJsonStreaming(endpoint, "/v1/chat/completions",
                                                  request.dump(), f.api_key,
                                                  std::chrono::seconds(f.timeout_s), on_body);
  if (in_reasoning && colour) std::cout << "\033[0m";
  a.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!response.ok()) {
    a.error = response.status().ToString();
  } else if (response->status != 200) {
    const Json body = Json::parse(error_body, nullptr, false);
    a.error = body.is_object() && body.contains("error")
                  ? body["error"].value("message", error_body)
                  : "HTTP " + std::to_string(response->status) + ": " + error_body;
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chat with a model served by an OpenAI-compatible server"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  Flags f;
  app.add_option("--url", f.url, "server base URL")->capture_default_str();
  app.add_option("--system", f.system, "system prompt");
  app.add_flag("--think", f.think, "show the model's reasoning in grey");
  app.add_option("--max-tokens", f.max_tokens)->capture_default_str();
  app.add_option("--temperature", f.temperature)->capture_default_str();
  app.add_option("--api-key", f.api_key, "bearer key for the server");
  app.add_option("--model", f.model, "model name to send (servers with several)");
  app.add_option("--timeout-s", f.timeout_s, "longest silence of the server")
      ->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-chat")) return *code;
  auto endpoint = xserv::tools::HttpEndpoint::Parse(f.url);
  if (!endpoint.ok()) {
    spdlog::error("{}", endpoint.status().ToString());
    return 2;
  }
  const bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  xserv::tools::ChatSession session(f.system);
  using Action = xserv::tools::ChatSession::Action;
  if (interactive) std::cout << "xserv-chat on " << f.url << " (/help for commands)\n";
  std::string line;
  while (true) {
    if (interactive) std::cout << "\033[1m> \033[0m" << std::flush;
    if (!std::getline(std::cin, line)) break;  // end of input ends the chat
    switch (session.HandleLine(line)) {
      case Action::kExit:
        return 0;
      case Action::kCleared:
        std::cout << "[history cleared]\n";
        continue;
      case Action::kSystemSet:
        std::cout << "[system prompt set]\n";
        continue;
      case Action::kHelp:
        std::cout << "/clear  forget the conversation\n/system TEXT  set (or, empty, remove) "
                     "the system prompt\n/exit  leave\n";
        continue;
      case Action::kUnknownCommand:
        std::cout << "[unknown command; /help lists them]\n";
        continue;
      case Action::kNothing:
        continue;
      case Action::kSend:
        break;
    }
    const Answer a = Ask(f, *endpoint, session.Request(f.model, f.max_tokens, f.temperature),
                         interactive);
    std::cout << "\n";
    if (!a.error.empty()) {
      std::cout << "[error: " << a.error << "]\n";
      session.DropUnanswered();
      continue;
    }
    session.AddAnswer(a.content);
    const double gen_s = a.seconds - std::max(0.0, a.first_token_s);
    std::cout << "[" << a.prompt_tokens << " prompt tokens, " << a.completion_tokens
              << " generated, "
              << (gen_s > 0 && a.completion_tokens > 1 ? (a.completion_tokens - 1) / gen_s : 0.0)
              << " tok/s]\n";
  }
  return 0;
}
