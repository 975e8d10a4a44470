// ChatBackend over xserv's public gRPC API, which takes text, not messages: the conversation is
// rendered in ChatML (chat_prompt.h) and sent as text; the ChatML end-of-turn token, looked up
// once with Tokenize, stops the answer; <think> reasoning is split from the streamed text.
#include "tools/chat/chat_prompt.h"
#include "tools/chat/chat_backend.h"
#include "tools/common/generation_client.h"

namespace xserv::tools {
namespace {

using Clock = std::chrono::steady_clock;

class GrpcChat final : public ChatBackend {
 public:
  explicit GrpcChat(const ChatOptions& options)
      : options_(options), client_(options.url, options.api_key, options.timeout) {}

  Answer Ask(const ChatSession& session, AnswerPrinter& printer) override {
    xserv::v1::GenerateRequest request;
    if (!options_.model.empty()) request.set_model(options_.model);
    request.set_text(RenderChatMl(session.Messages()));
    xserv::v1::SamplingParams& sampling = *request.mutable_sampling();
    sampling.set_max_tokens(static_cast<uint32_t>(options_.max_tokens));
    sampling.set_temperature(static_cast<float>(options_.temperature));
    if (const int end = EndOfTurnId(); end >= 0) sampling.add_stop_token_ids(end);
    Answer a;
    ThinkSplitter splitter;
    const auto start = Clock::now();
    auto print = [&](const ThinkSplitter::Pieces& pieces) {
      printer.Reasoning(pieces.reasoning);
      printer.Content(pieces.content);
      a.content += pieces.content;
    };
    auto complete = client_.Generate(request, [&](const xserv::v1::Chunk& chunk) {
      if (!chunk.text().empty() && a.first_token_s < 0) {
        a.first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
      }
      print(splitter.Feed(chunk.text()));
    });
    print(splitter.Flush());
    printer.End();
    a.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!complete.ok()) {
      a.error = complete.status().ToString();
      return a;
    }
    a.prompt_tokens = static_cast<int>(complete->usage().prompt_tokens());
    a.completion_tokens = static_cast<int>(complete->usage().completion_tokens());
    return a;
  }

 private:
  // The id of "<|im_end|>" when the served tokenizer has it as one token, else -1; asked once.
  int EndOfTurnId() {
    if (!end_of_turn_id_) {
      auto ids = client_.Tokenize(std::string(kChatMlEnd));
      if (!ids.ok()) return -1;  // asked again next turn (the server may be back)
      end_of_turn_id_ = ids->size() == 1 ? static_cast<int>((*ids)[0]) : -1;
    }
    return *end_of_turn_id_;
  }

  const ChatOptions options_;
  GenerationClient client_;
  std::optional<int> end_of_turn_id_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatBackend>> MakeGrpcChat(const ChatOptions& options) {
  if (options.url.rfind("http://", 0) == 0) {
    return absl::InvalidArgumentError("--backend grpc takes host:port (or grpc://host:port)");
  }
  return std::make_unique<GrpcChat>(options);
}

}  // namespace xserv::tools
