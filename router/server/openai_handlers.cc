#include "router/server/openai_handlers.h"

#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "router/openai/prepare.h"
#include "router/openai/request.h"
#include "router/openai/responses.h"
#include "router/server/admission.h"
#include "router/server/generation_run.h"
#include "spdlog/spdlog.h"

namespace xserv::router {
namespace {

namespace asio = boost::asio;
using http::HttpRequest;
using http::HttpResponder;

asio::awaitable<void> SendJson(HttpResponder& res, int status, const std::string& body,
                               http::HttpHeaders extra = {}) {
  co_await res.Send(status, "application/json", body, std::move(extra));
}

asio::awaitable<void> SendError(HttpResponder& res, const ApiError& e) {
  http::HttpHeaders extra;
  if (e.http_status == 429) extra.emplace_back("Retry-After", "1");
  co_await SendJson(res, e.http_status, e.ToJson(), std::move(extra));
}

// The request body as JSON, or nullopt after answering the client with the parse error.
asio::awaitable<std::optional<Json>> ReadJsonBody(const HttpRequest& http_req,
                                                  HttpResponder& res) {
  auto body = ParseJsonBody(http_req.body);
  if (auto* e = std::get_if<ApiError>(&body)) {
    const ApiError error = *e;
    co_await SendError(res, error);
    co_return std::nullopt;
  }
  co_return std::move(std::get<Json>(body));
}

ApiError Unauthorized() {
  return ApiError::FromStatus(absl::UnauthenticatedError(
      "missing or invalid API key (send 'Authorization: Bearer <key>')"));
}

asio::awaitable<void> StreamGeneration(HttpResponder& res, GenerationRun& run,
                                       const GenerationRequest& req, const ResponseMeta& meta,
                                       const ModelContext& model) {
  const bool chat = req.kind == GenerationRequest::Kind::kChat;
  const TokenRenderer tokens{model.tokenizer.get(), req.return_tokens_as_token_ids};
  if (!co_await res.StartSse()) co_return;
  std::vector<bool> role_sent(run.num_choices(), false);
  // Completions with echo: the prompt text (and its tokens' logprobs, which the worker sends all
  // at once with the first token: engine_step.cc, prompt_logprobs_sent) comes first, in each
  // choice's first chunk.
  std::vector<bool> echo_pending(run.num_choices(), !chat && req.echo);
  std::vector<size_t> text_offsets(run.num_choices(), 0);  // completions' logprobs text_offset
  absl::Status error;
  while (true) {
    std::vector<ChoiceUpdate> updates = co_await run.Next();
    if (updates.empty()) break;
    for (ChoiceUpdate& u : updates) {
      if (!u.error.ok()) {
        if (error.ok()) error = u.error;
        continue;
      }
      std::string body;
      if (chat) {
        ChatChunk chunk{.index = u.index,
                        .role = !role_sent[u.index],
                        .reasoning = std::move(u.delta.reasoning),
                        .content = std::move(u.delta.content),
                        .tool_calls = std::move(u.delta.tool_calls),
                        .logprobs = std::move(u.logprobs)};
        role_sent[u.index] = true;
        const bool has_payload = chunk.role || !chunk.reasoning.empty() || !chunk.content.empty() ||
                                 !chunk.tool_calls.empty() || !chunk.logprobs.empty();
        if (has_payload) {
          if (!co_await res.SendSse(ChatChunkBody(meta, chunk, req.logprobs, tokens))) {
            run.Abandon();
            co_return;
          }
        }
        if (u.finish_reason) {
          ChatChunk last{
              .index = u.index, .finish_reason = u.finish_reason, .stop_reason = u.stop_reason};
          body = ChatChunkBody(meta, last, false, tokens);
        }
      } else {
        CompletionChunk chunk{.index = u.index,
                              .text = std::move(u.delta.content),
                              .logprobs = std::move(u.logprobs),
                              .finish_reason = u.finish_reason,
                              .stop_reason = u.stop_reason};
        if (echo_pending[u.index]) {
          const PreparedPrompt& prompt = run.prepared().prompts[u.index / run.prepared().n];
          chunk.text = prompt.text + chunk.text;
          chunk.prompt_ids = &prompt.ids;
          chunk.prompt_logprobs = std::move(u.prompt_logprobs);
          echo_pending[u.index] = false;
        }
        if (chunk.text.empty() && chunk.logprobs.empty() && chunk.prompt_ids == nullptr &&
            !chunk.finish_reason) {
          continue;
        }
        body = CompletionChunkBody(meta, chunk, req.logprobs, tokens, text_offsets[u.index]);
      }
      if (!body.empty() && !co_await res.SendSse(body)) {
        run.Abandon();
        co_return;
      }
    }
  }
  if (!error.ok()) {
    co_await res.SendSse(ApiError::FromStatus(error).ToJson());
  } else if (req.include_usage) {
    co_await res.SendSse(
        UsageChunkBody(meta, chat ? "chat.completion.chunk" : "text_completion", run.usage()));
  }
  co_await res.SendSse("[DONE]");
  co_await res.EndSse();
}

asio::awaitable<void> HandleGeneration(RouterState& state, const HttpRequest& http_req,
                                       HttpResponder& res, GenerationRequest::Kind kind) {
  const std::optional<Json> body = co_await ReadJsonBody(http_req, res);
  if (!body) co_return;
  const Json& json = *body;
  auto parsed = kind == GenerationRequest::Kind::kChat ? ParseChatRequest(json)
                                                       : ParseCompletionRequest(json);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    const ApiError error = *e;
    co_await SendError(res, error);
    co_return;
  }
  const GenerationRequest& req = std::get<GenerationRequest>(parsed);
  const ModelContext& model = *state.model;
  auto prepared = Prepare(req, model);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    const ApiError error = *e;
    co_await SendError(res, error);
    co_return;
  }
  Admission admission(state);
  if (const absl::Status admitted = co_await admission.Acquire(); !admitted.ok()) {
    const ApiError error = ApiError::FromStatus(admitted);  // 503 draining, 429 at capacity
    co_await SendError(res, error);
    co_return;
  }

  const bool chat = kind == GenerationRequest::Kind::kChat;
  ResponseMeta meta{.id = state.NewId(chat ? "chatcmpl" : "cmpl"),
                    .created = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count(),
                    .model = model.served_name};
  int64_t prompt_tokens = 0;
  for (const PreparedPrompt& p : std::get<PreparedGeneration>(prepared).prompts) {
    prompt_tokens += static_cast<int64_t>(p.ids.size());
  }
  GenerationRun run(state, std::move(std::get<PreparedGeneration>(prepared)), meta.id, req.priority,
                    res.executor());
  if (auto status = run.Start(); !status.ok()) {
    run.CancelAll();
    {
      const ApiError error = ApiError::FromStatus(status);
      co_await SendError(res, error);
      co_return;
    }
  }
  res.OnClientGone([&run] { run.CancelAll(); });
  state.metrics.AddPromptTokens(prompt_tokens);
  if (req.stream) {
    co_await StreamGeneration(res, run, req, meta, model);
  } else {
    while (!(co_await run.Next()).empty()) {
    }
    if (const absl::Status failed = run.first_error(); !failed.ok()) {
      const ApiError error = ApiError::FromStatus(failed);
      co_await SendError(res, error);
    } else {
      const TokenRenderer tokens{model.tokenizer.get(), req.return_tokens_as_token_ids};
      std::vector<ChoiceResult> results = run.Results();
      if (!chat && req.echo) {
        for (ChoiceResult& r : results) {
          const PreparedPrompt& p = run.prepared().prompts[r.index / run.prepared().n];
          r.prompt_ids = &p.ids;
          r.prompt_text = p.text;
        }
      }
      const std::string out =
          chat ? ChatCompletionBody(meta, results, run.usage(), req.logprobs, tokens)
               : CompletionBody(meta, results, run.usage(), req.logprobs, tokens);
      co_await SendJson(res, 200, out);
    }
  }
  state.metrics.AddGenerationTokens(run.usage().completion_tokens);
}

// JSON bodies are built outside coroutines: GCC 12 miscompiles braced initialiser lists of
// string literals inside coroutine bodies ("array used as initializer").
Json ModelObject(const ModelContext& m) {
  return {{"id", m.served_name}, {"object", "model"},     {"created", m.created_unix},
          {"owned_by", "xserv"}, {"root", m.served_name}, {"max_model_len", m.max_context}};
}

std::string ModelsBody(const ModelContext& m) {
  return Json{{"object", "list"}, {"data", Json::array({ModelObject(m)})}}.dump();
}

// vLLM's GET /version.
std::string VersionBody() { return Json{{"version", GetBuildInfo().version}}.dump(); }

std::string TokenizeBody(const std::vector<uint32_t>& ids, int32_t max_context) {
  return Json{{"count", ids.size()}, {"max_model_len", max_context}, {"tokens", ids}}.dump();
}

std::string DetokenizeBody(const std::string& text) {
  return Json{{"prompt", text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string StatusBody(const char* status) { return Json{{"status", status}}.dump(); }

// GET /v1/models (the list) or /v1/models/{id} (OpenAI's retrieve; the id percent-decoded, as
// "Qwen%2FQwen3-8B"; 404 for any name but the served one).
asio::awaitable<void> HandleModels(RouterState& state, std::string_view path, HttpResponder& res) {
  if (path == "/v1/models") {
    co_await SendJson(res, 200, ModelsBody(*state.model));
    co_return;
  }
  const std::string_view raw = path.substr(strlen("/v1/models/"));
  const std::string id = http::PercentDecode(raw).value_or(std::string(raw));
  if (auto e = CheckModelName(id, *state.model)) {
    const ApiError error = *e;
    co_await SendError(res, error);
    co_return;
  }
  co_await SendJson(res, 200, ModelObject(*state.model).dump());
}

asio::awaitable<void> HandleTokenize(RouterState& state, const HttpRequest& http_req,
                                     HttpResponder& res) {
  const std::optional<Json> body = co_await ReadJsonBody(http_req, res);
  if (!body) co_return;
  const Json& json = *body;
  const ModelContext& model = *state.model;
  std::vector<uint32_t> ids;
  if (json.contains("messages") && json.contains("prompt")) {
    const ApiError error = ApiError::Invalid("give 'prompt' or 'messages', not both", "prompt");
    co_await SendError(res, error);
    co_return;
  }
  if (json.contains("messages")) {
    Json chat_body = json;
    if (!chat_body.contains("add_generation_prompt")) chat_body["add_generation_prompt"] = true;
    auto parsed = ParseChatRequest(chat_body);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      const ApiError error = *e;
      co_await SendError(res, error);
      co_return;
    }
    if (auto e = CheckModelName(std::get<GenerationRequest>(parsed).model, model)) {
      const ApiError error = *e;
      co_await SendError(res, error);
      co_return;
    }
    auto rendered = RenderChat(std::get<GenerationRequest>(parsed), model);
    if (auto* e = std::get_if<ApiError>(&rendered)) {
      const ApiError error = *e;
      co_await SendError(res, error);
      co_return;
    }
    ids = std::get<PreparedPrompt>(rendered).ids;
  } else if (json.contains("prompt") && json.at("prompt").is_string()) {
    auto parsed = ParseTokenizePromptRequest(json);
    std::optional<ApiError> error;
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      error = *e;
    } else {
      error = CheckModelName(std::get<TokenizePromptRequest>(parsed).model, model);
    }
    if (error) {
      const ApiError failed = *error;
      co_await SendError(res, failed);
      co_return;
    }
    const TokenizePromptRequest& req = std::get<TokenizePromptRequest>(parsed);
    ids = EncodeText(model, req.prompt, req.add_special_tokens);
  } else {
    const ApiError error =
        ApiError::Invalid("'prompt' (a string) or 'messages' is required", "prompt");
    co_await SendError(res, error);
    co_return;
  }
  co_await SendJson(res, 200, TokenizeBody(ids, model.max_context));
}

asio::awaitable<void> HandleDetokenize(RouterState& state, const HttpRequest& http_req,
                                       HttpResponder& res) {
  const std::optional<Json> body = co_await ReadJsonBody(http_req, res);
  if (!body) co_return;
  const Json& json = *body;
  if (!json.contains("tokens") || !json.at("tokens").is_array()) {
    const ApiError error = ApiError::Invalid("'tokens' (a list) is required", "tokens");
    co_await SendError(res, error);
    co_return;
  }
  std::vector<uint32_t> ids;
  for (const Json& t : json.at("tokens")) {
    if (!t.is_number_unsigned() ||
        (state.model->vocab_size > 0 &&
         t.get<uint64_t>() >= static_cast<uint64_t>(state.model->vocab_size))) {
      const ApiError error = ApiError::Invalid("'tokens' must be valid token ids", "tokens");
      co_await SendError(res, error);
      co_return;
    }
    ids.push_back(t.get<uint32_t>());
  }
  co_await SendJson(
      res, 200, DetokenizeBody(state.model->tokenizer->Decode(ids, /*skip_special_tokens=*/false)));
}

ApiError MethodNotAllowed(const char* use) {
  ApiError e;
  e.http_status = 405;
  e.message = std::string("method not allowed; use ") + use;
  return e;
}

ApiError NoRoute(const std::string& method, const std::string& path) {
  ApiError e;
  e.http_status = 404;
  e.message = absl::StrCat("no route for ", method, " ", path);
  e.code = "not_found";
  return e;
}

// Every error below is a named local: GCC 12 mishandles temporaries with non-trivial destructors
// inside co_await expressions (double free), so none is built inside one.
asio::awaitable<void> Dispatch(RouterState& state, const HttpRequest& req, HttpResponder& res) {
  const std::string path(req.path());
  const bool post = req.method == "POST";
  // HEAD as GET without the body (the responder drops it): load balancers probe with either.
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool model_path = path == "/v1/models" || path.starts_with("/v1/models/");
  if (path == "/health" || path == "/ready" || path == "/metrics" || path == "/version" ||
      model_path) {
    if (!get) {
      const ApiError error = MethodNotAllowed("GET or HEAD");
      co_await SendError(res, error);
    } else if (path == "/health") {
      co_await SendJson(res, 200, StatusBody("ok"));
    } else if (path == "/ready") {
      if (state.pool->AnyReady() && !state.draining) {
        co_await SendJson(res, 200, StatusBody("ready"));
      } else {
        const ApiError error = ApiError::FromStatus(absl::UnavailableError(
            state.draining ? "the router is draining" : "no worker replica is ready"));
        co_await SendError(res, error);
      }
    } else if (path == "/metrics") {
      state.RefreshWorkerMetrics();
      co_await res.Send(200, "text/plain; version=0.0.4", state.metrics.Render());
    } else if (path == "/version") {
      co_await SendJson(res, 200, VersionBody());
    } else if (!Authorized(state.limits, req.Header("Authorization").value_or(""))) {
      const ApiError error = Unauthorized();
      co_await SendError(res, error);
    } else {
      co_await HandleModels(state, path, res);
    }
    co_return;
  }
  if (!Authorized(state.limits, req.Header("Authorization").value_or(""))) {
    const ApiError error = Unauthorized();
    co_await SendError(res, error);
    co_return;
  }
  const bool generation = path == "/v1/chat/completions" || path == "/v1/completions";
  if (generation || path == "/tokenize" || path == "/detokenize") {
    if (!post) {
      const ApiError error = MethodNotAllowed("POST");
      co_await SendError(res, error);
    } else if (path == "/v1/chat/completions") {
      co_await HandleGeneration(state, req, res, GenerationRequest::Kind::kChat);
    } else if (path == "/v1/completions") {
      co_await HandleGeneration(state, req, res, GenerationRequest::Kind::kCompletion);
    } else if (path == "/tokenize") {
      co_await HandleTokenize(state, req, res);
    } else {
      co_await HandleDetokenize(state, req, res);
    }
    co_return;
  }
  const ApiError error = NoRoute(req.method, path);
  co_await SendError(res, error);
}

}  // namespace

http::HttpHandler MakeOpenAiHandler(RouterState& state) {
  return [&state](const HttpRequest& req, HttpResponder& res) -> asio::awaitable<void> {
    co_await Dispatch(state, req, res);
  };
}

}  // namespace xserv::router
