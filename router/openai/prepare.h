// Prepare: a parsed OpenAI request + the model context -> what the router sends to workers:
// prompt token ids (chat conversations rendered with the model's template and tokenised),
// the worker SamplingParams with defaults applied (request, then generation_config.json, then
// the worker's own), and the output pipeline parameters. Every problem is an ApiError.
//
// Pure function of its inputs; called on the request's handler coroutine.
#pragma once

#include <string>
#include <vector>

#include "router/openai/model_context.h"
#include "router/openai/request.h"
#include "router/output/output_pipeline.h"
#include "xserv/worker/v1/worker.pb.h"

namespace xserv::router {

struct PreparedPrompt {
  std::vector<uint32_t> ids;
  std::string text;  // the prompt as text (rendered chat prompt or decoded ids), for echo
};

struct PreparedGeneration {
  std::vector<PreparedPrompt> prompts;
  xserv::worker::v1::SamplingParams sampling;  // per choice, the seed is offset by the index
  output::OutputPipelineParams output;
  uint32_t n = 1;
  bool prompt_logprobs = false;  // completions echo + logprobs
  // Completions with echo and max_tokens 0: only the prompt (and its logprobs) is returned; the
  // worker still generates one token, which is dropped and not counted.
  bool prompt_only = false;
};

ApiResult<PreparedGeneration> Prepare(const GenerationRequest& request, const ModelContext& model);

// 404 model_not_found when a request names another model than the served one (absent: fine).
std::optional<ApiError> CheckModelName(const std::optional<std::string>& name,
                                       const ModelContext& model);

// `text` as HF's tokenizer(text, add_special_tokens=...) gives it: the tokenizer's BOS first when
// asked and it has one (common/tokenizer/tokenizer.h: Encode itself never adds it).
std::vector<uint32_t> EncodeText(const ModelContext& model, const std::string& text,
                                 bool add_special_tokens);

// Renders and tokenises a chat request's messages (also used by /tokenize).
ApiResult<PreparedPrompt> RenderChat(const GenerationRequest& request, const ModelContext& model);

}  // namespace xserv::router
