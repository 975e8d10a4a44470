#include "router/openai/prepare.h"

#include "absl/strings/str_cat.h"

namespace xserv::router {

std::vector<uint32_t> EncodeText(const ModelContext& model, const std::string& text,
                                 bool add_special_tokens) {
  std::vector<uint32_t> ids;
  if (add_special_tokens && model.tokenizer->bos_id()) ids.push_back(*model.tokenizer->bos_id());
  const std::vector<uint32_t> body = model.tokenizer->Encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

ApiResult<PreparedPrompt> RenderChat(const GenerationRequest& request, const ModelContext& model) {
  if (absl::IsNotFound(model.chat_template.status())) {
    return ApiError::Invalid("this model has no chat template; use /v1/completions");
  }
  if (!model.chat_template.ok()) {
    return ApiError::FromStatus(absl::InternalError(absl::StrCat(
        "the model's chat template does not load: ", model.chat_template.status().message())));
  }
  chat_template::ChatRenderRequest render;
  render.messages = request.messages;
  if (!request.tools.is_null()) render.tools = request.tools;
  render.add_generation_prompt = request.add_generation_prompt;
  render.kwargs = request.chat_template_kwargs;
  render.flatten_text_content = true;  // content-part lists of text work with every template
  auto prompt = model.chat_template->Render(render);
  if (!prompt.ok()) {
    return ApiError::Invalid(absl::StrCat("chat template: ", prompt.status().message()),
                             "messages");
  }
  PreparedPrompt out;
  out.text = std::move(*prompt);
  out.ids = EncodeText(model, out.text, request.add_special_tokens);
  return out;
}

std::optional<ApiError> CheckModelName(const std::optional<std::string>& name,
                                       const ModelContext& model) {
  if (!name || *name == model.served_name) return std::nullopt;
  ApiError e;
  e.http_status = 404;
  e.message = absl::StrCat("The model '", *name, "' does not exist; this server serves '",
                           model.served_name, "'");
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

ApiResult<PreparedGeneration> Prepare(const GenerationRequest& request, const ModelContext& model) {
  if (auto e = CheckModelName(request.model, model)) return *e;
  PreparedGeneration g;
  g.n = request.n;
  if (request.kind == GenerationRequest::Kind::kChat) {
    auto chat = RenderChat(request, model);
    if (auto* e = std::get_if<ApiError>(&chat)) return *e;
    g.prompts.push_back(std::move(std::get<PreparedPrompt>(chat)));
  } else {
    for (const PromptInput& p : request.prompts) {
      PreparedPrompt prompt;
      if (const auto* text = std::get_if<std::string>(&p)) {
        prompt.text = *text;
        prompt.ids = EncodeText(model, *text, request.add_special_tokens);
      } else {
        prompt.ids = std::get<std::vector<uint32_t>>(p);
        for (uint32_t id : prompt.ids) {
          if (model.vocab_size > 0 && id >= static_cast<uint32_t>(model.vocab_size)) {
            return ApiError::Invalid(
                absl::StrCat("token id ", id, " is outside the vocabulary of ", model.vocab_size),
                "prompt");
          }
        }
        prompt.text = model.tokenizer->Decode(prompt.ids, /*skip_special_tokens=*/false);
      }
      g.prompts.push_back(std::move(prompt));
    }
  }
  const SamplingRequest& s = request.sampling;
  for (const PreparedPrompt& p : g.prompts) {
    if (p.ids.empty()) return ApiError::Invalid("the prompt is empty", "prompt");
    const int64_t prompt_len = static_cast<int64_t>(p.ids.size());
    // max_tokens 0 (echo: the prompt's logprobs only) still runs one decode position.
    const int64_t wanted = std::max<int64_t>(s.max_tokens ? *s.max_tokens : 1, 1);
    if (model.max_context > 0 && prompt_len + wanted > model.max_context) {
      return ApiError::Invalid(
          absl::StrCat("This model's maximum context length is ", model.max_context,
                       " tokens. However, you requested ", prompt_len + wanted, " tokens (",
                       prompt_len, " in the prompt, ", wanted, " for the completion",
                       s.max_tokens && *s.max_tokens == 0
                           ? ": scoring a prompt with max_tokens 0 takes one position too"
                           : "",
                       ")."),
          s.max_tokens ? "max_tokens" : "messages");
    }
  }

  xserv::worker::v1::SamplingParams& w = g.sampling;
  const GenerationConfig& d = model.generation;
  // Request value, else the model's generation_config.json default (as vLLM does).
  if (s.temperature)
    w.set_temperature(*s.temperature);
  else if (d.temperature)
    w.set_temperature(static_cast<float>(*d.temperature));
  if (s.top_p)
    w.set_top_p(*s.top_p);
  else if (d.top_p)
    w.set_top_p(static_cast<float>(*d.top_p));
  if (s.top_k)
    w.set_top_k(*s.top_k);
  else if (d.top_k)
    w.set_top_k(static_cast<int32_t>(*d.top_k));
  if (s.min_p)
    w.set_min_p(*s.min_p);
  else if (d.min_p)
    w.set_min_p(static_cast<float>(*d.min_p));
  if (s.repetition_penalty)
    w.set_repetition_penalty(*s.repetition_penalty);
  else if (d.repetition_penalty)
    w.set_repetition_penalty(static_cast<float>(*d.repetition_penalty));
  if (s.presence_penalty) w.set_presence_penalty(*s.presence_penalty);
  if (s.frequency_penalty) w.set_frequency_penalty(*s.frequency_penalty);
  for (const auto& [id, bias] : s.logit_bias) {
    if (model.vocab_size > 0 && id >= static_cast<uint32_t>(model.vocab_size)) {
      return ApiError::Invalid(absl::StrCat("logit_bias token ", id, " is outside the vocabulary"),
                               "logit_bias");
    }
    (*w.mutable_logit_bias())[id] = bias;
  }
  if (s.seed) w.set_seed(*s.seed);
  if (s.max_tokens && *s.max_tokens == 0) {
    if (!request.echo) {
      return ApiError::Invalid("'max_tokens' 0 is only allowed with 'echo': true", "max_tokens");
    }
    g.prompt_only = true;
    w.set_max_tokens(1);
  } else if (s.max_tokens) {
    w.set_max_tokens(*s.max_tokens);
  }
  if (s.min_tokens) w.set_min_tokens(*s.min_tokens);
  w.set_ignore_eos(s.ignore_eos);
  for (uint32_t id : s.stop_token_ids) w.add_stop_token_ids(id);
  if (request.logprobs) w.set_logprobs(request.top_logprobs);
  if (request.kind == GenerationRequest::Kind::kCompletion && request.echo && request.logprobs) {
    w.set_prompt_logprobs(request.top_logprobs);
    g.prompt_logprobs = true;
  }

  g.output.skip_special_tokens = s.skip_special_tokens;
  g.output.stop.stop = s.stop;
  g.output.stop.include_stop_str_in_output = s.include_stop_str_in_output;
  g.output.final_token_ids = s.stop_token_ids;
  g.output.min_tokens = s.min_tokens.value_or(0);
  if (!s.ignore_eos) {
    g.output.final_token_ids.insert(g.output.final_token_ids.end(), model.eos_token_ids.begin(),
                                    model.eos_token_ids.end());
  }
  g.output.reasoning_format = request.kind == GenerationRequest::Kind::kChat
                                  ? model.reasoning_format
                                  : output::ReasoningFormat::kNone;
  if (auto status = g.output.Validate(); !status.ok()) {
    return ApiError::Invalid(std::string(status.message()), "stop");
  }
  return g;
}

}  // namespace xserv::router
