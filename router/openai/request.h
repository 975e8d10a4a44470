// Parsed and validated OpenAI-style requests (/v1/chat/completions, /v1/completions), before
// templating and tokenisation. Parsing never throws: every problem is an ApiError naming the
// field (param), as OpenAI reports it.
//
// Plain data; built on the HTTP handler's coroutine and read by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/openai/api_error.h"

namespace xserv::router {

using Json = nlohmann::ordered_json;  // keeps key order (tool schemas are rendered verbatim)

// Sampling fields exactly as the client sent them; absent fields stay absent so defaults are
// applied in one place (generation_config.json, then the worker).
struct SamplingRequest {
  std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<uint32_t> max_tokens;  // max_tokens / max_completion_tokens
  std::optional<uint32_t> min_tokens;
  bool ignore_eos = false;
  std::vector<std::pair<uint32_t, float>> logit_bias;
  std::vector<std::string> stop;
  std::vector<uint32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
};

// One prompt of a completion request: text or token ids.
using PromptInput = std::variant<std::string, std::vector<uint32_t>>;

struct GenerationRequest {
  enum class Kind { kChat, kCompletion };
  Kind kind = Kind::kChat;
  std::optional<std::string> model;
  // kChat: the conversation and template inputs.
  Json messages;              // array as sent (content string or parts)
  Json tools;                 // null when absent
  Json chat_template_kwargs;  // object (enable_thinking, reasoning_effort, ...)
  bool add_generation_prompt = true;
  // kCompletion: one or more prompts.
  std::vector<PromptInput> prompts;
  bool echo = false;
  // vLLM's add_special_tokens: text is tokenised as HF's tokenizer(text) does, with the
  // tokenizer's BOS in front where its post-processor adds one (Llama; not Qwen3, GPT-2 or
  // gpt-oss). Default true for completions, false for chat, whose template writes its own.
  bool add_special_tokens = false;

  SamplingRequest sampling;
  uint32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: logprobs (bool) + top_logprobs; completions: logprobs (int) = number of alternatives.
  bool logprobs = false;
  uint32_t top_logprobs = 0;
  int32_t priority = 0;
  std::string user;
  // vLLM extension: logprob tokens rendered as "token_id:<id>" instead of text.
  bool return_tokens_as_token_ids = false;
};

// Either the parsed value or the error to return to the client.
template <typename T>
using ApiResult = std::variant<T, ApiError>;

ApiResult<GenerationRequest> ParseChatRequest(const Json& body);

// /tokenize of a prompt (vLLM's TokenizeCompletionRequest): the text, the model it names, and
// add_special_tokens (default true, as for completions).
struct TokenizePromptRequest {
  std::string prompt;
  std::optional<std::string> model;
  bool add_special_tokens = true;
};
ApiResult<TokenizePromptRequest> ParseTokenizePromptRequest(const Json& body);
ApiResult<GenerationRequest> ParseCompletionRequest(const Json& body);

// Parses a request body into ordered JSON (nesting depth limited); a syntax error, invalid
// UTF-8 or a non-object body is an ApiError (400).
ApiResult<Json> ParseJsonBody(const std::string& body);

}  // namespace xserv::router
