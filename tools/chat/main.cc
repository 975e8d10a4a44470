// xserv-chat: a terminal chat client for any OpenAI-compatible server (HTTP, streaming SSE) or
// xserv's public gRPC API (--backend grpc; the conversation rendered in ChatML, see
// chat_prompt.h). Multi-turn history; /clear, /system TEXT, /exit, /help; --think shows
// reasoning (Qwen3 <think>, gpt-oss analysis) in grey; after each answer, the prompt and
// generated token counts and the generation speed. On a terminal, lines are edited with libedit
// when built with it (UTF-8 aware), else with the terminal's canonical mode; when stdin or stdout
// is not a terminal there are no colours or prompts, so it can be scripted.
//
//   xserv-chat [--url http://127.0.0.1:8080] [--backend openai|grpc] [--system TEXT] [--think]
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "common/flags.h"
#include "spdlog/spdlog.h"
#include "tools/chat/chat_backend.h"
#include "tools/chat/chat_session.h"
#include "tools/chat/line_reader.h"

int main(int argc, char** argv) {
  CLI::App app{"Chat with a model served by an OpenAI-compatible server or xserv's gRPC API"};
  xserv::CommonFlags common;
  xserv::AddCommonFlags(app, common);
  xserv::tools::ChatOptions o;
  std::string backend = "openai", system;
  bool think = false;
  int timeout_s = 300;
  app.add_option("--backend", backend, "openai (HTTP) or grpc (xserv.v1.Generation)")
      ->check(CLI::IsMember({"openai", "grpc"}))
      ->capture_default_str();
  app.add_option("--url", o.url,
                 "server: http://host:port (openai, default http://127.0.0.1:8080) or "
                 "host:port (grpc, default 127.0.0.1:50051)");
  app.add_option("--system", system, "system prompt");
  app.add_flag("--think", think, "show the model's reasoning in grey");
  app.add_option("--max-tokens", o.max_tokens)->capture_default_str();
  app.add_option("--temperature", o.temperature)->capture_default_str();
  app.add_option("--api-key", o.api_key, "bearer key for the server");
  app.add_option("--model", o.model, "model name to send (servers with several)");
  app.add_option("--timeout-s", timeout_s, "longest wait for one answer")->capture_default_str();
  if (auto code = xserv::ParseCommandLine(app, argc, argv, common, "xserv-chat")) return *code;
  const bool grpc = backend == "grpc";
  if (o.url.empty()) o.url = grpc ? "127.0.0.1:50051" : "http://127.0.0.1:8080";
  o.timeout = std::chrono::seconds(timeout_s);
  auto chat = grpc ? xserv::tools::MakeGrpcChat(o) : xserv::tools::MakeHttpChat(o);
  if (!chat.ok()) {
    spdlog::error("{}", chat.status().ToString());
    return 2;
  }
  std::setlocale(LC_CTYPE, "");  // libedit edits multibyte characters only in a UTF-8 locale
  const bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  xserv::tools::LineReader reader(interactive);
  xserv::tools::ChatSession session(system);
  using Action = xserv::tools::ChatSession::Action;
  if (interactive) std::cout << "xserv-chat on " << o.url << " (/help for commands)\n";
  while (std::optional<std::string> line = reader.Read("> ")) {
    switch (session.HandleLine(*line)) {
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
    xserv::tools::AnswerPrinter printer(think, interactive);
    const xserv::tools::Answer a = (*chat)->Ask(session, printer);
    std::cout << "\n";
    if (!a.error.empty()) {
      std::cout << "[error: " << a.error << "]\n";
      session.DropUnanswered();
      continue;
    }
    session.AddAnswer(a.content);
    char stats[160];
    std::snprintf(stats, sizeof(stats), "[%d prompt tokens, %d generated, %.1f tok/s]\n",
                  a.prompt_tokens, a.completion_tokens, a.TokensPerSecond());
    std::cout << stats;
  }
  return 0;
}
