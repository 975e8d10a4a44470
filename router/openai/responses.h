// JSON bodies of OpenAI responses: chat.completion, text_completion, their streaming chunks, and
// logprobs in both the chat (`logprobs.content[]`) and legacy completions
// (`tokens/token_logprobs/top_logprobs/text_offset`) shapes. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "router/openai/request.h"
#include "router/output/output_pipeline.h"
#include "xserv/worker/v1/worker.pb.h"

namespace xserv::router {

// How logprob tokens are rendered: their text (default), or "token_id:<id>" (vLLM's
// return_tokens_as_token_ids).
struct TokenRenderer {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  bool as_token_ids = false;
  std::string Text(uint32_t id) const;
  std::string Bytes(uint32_t id) const;  // raw token bytes (empty with as_token_ids)
};

struct ResponseMeta {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// vLLM's stop_reason (an extension of OpenAI's): the matched stop string, or the matched
// stop_token_ids entry, which the JSON gives as an integer; absent when the choice ended on EOS
// or on its length.
using StopReason = std::variant<std::string, uint32_t>;

// Everything known about one finished choice.
struct ChoiceResult {
  uint32_t index = 0;
  output::OutputText text;
  std::string finish_reason;               // stop | length | tool_calls | abort
  std::optional<StopReason> stop_reason;
  std::vector<xserv::worker::v1::PositionLogprobs> logprobs;         // one per output token
  std::vector<xserv::worker::v1::PositionLogprobs> prompt_logprobs;  // echo
  const std::vector<uint32_t>* prompt_ids = nullptr;                 // echo
  std::string prompt_text;                                           // echo
};

Json UsageJson(const UsageCounts& usage);

std::string ChatCompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                               const UsageCounts& usage, bool with_logprobs,
                               const TokenRenderer& tokens);
std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                           const UsageCounts& usage, bool with_logprobs,
                           const TokenRenderer& tokens);

// Chat chunk for one choice: role (first chunk), reasoning/content/tool-call deltas, logprobs of
// the tokens in this delta, finish_reason on the last.
struct ChatChunk {
  uint32_t index = 0;
  bool role = false;
  std::string reasoning;
  std::string content;
  std::vector<output::ToolCallDelta> tool_calls;
  std::vector<xserv::worker::v1::PositionLogprobs> logprobs;
  std::optional<std::string> finish_reason;
  std::optional<StopReason> stop_reason;
};
std::string ChatChunkBody(const ResponseMeta& meta, const ChatChunk& chunk, bool with_logprobs,
                          const TokenRenderer& tokens);

struct CompletionChunk {
  uint32_t index = 0;
  std::string text;
  std::vector<uint32_t> token_ids;
  std::vector<xserv::worker::v1::PositionLogprobs> logprobs;
  std::optional<std::string> finish_reason;
  std::optional<StopReason> stop_reason;
  // echo: the prompt's ids (with its logprobs), in the choice's first chunk, whose text starts
  // with the prompt's.
  const std::vector<uint32_t>* prompt_ids = nullptr;
  std::vector<xserv::worker::v1::PositionLogprobs> prompt_logprobs;
};
// `text_offset`: the choice's logprobs text_offset (in characters) where this chunk's tokens
// start; advanced past them, so that a stream's offsets run on across its chunks as the whole
// response's do.
std::string CompletionChunkBody(const ResponseMeta& meta, const CompletionChunk& chunk,
                                bool with_logprobs, const TokenRenderer& tokens,
                                size_t& text_offset);

// The final usage chunk of a stream (choices: []).
std::string UsageChunkBody(const ResponseMeta& meta, const std::string& object,
                           const UsageCounts& usage);

}  // namespace xserv::router
