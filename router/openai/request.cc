#include "router/openai/request.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace xserv::router {
namespace {

constexpr int kMaxJsonDepth = 64;
constexpr uint32_t kMaxN = 16;
constexpr uint32_t kMaxTopLogprobs = 20;
constexpr size_t kMaxStopStrings = 16;

// Reads typed optional fields, remembering the first error (OpenAI reports one).
class Fields {
 public:
  explicit Fields(const Json& body) : body_(body) {}

  const std::optional<ApiError>& error() const { return error_; }
  void Fail(std::string message, std::string param) {
    if (!error_) error_ = ApiError::Invalid(std::move(message), std::move(param));
  }
  bool Has(const char* key) const { return body_.contains(key) && !body_.at(key).is_null(); }
  const Json& At(const char* key) const { return body_.at(key); }

  std::optional<bool> Bool(const char* key) {
    if (!Has(key)) return std::nullopt;
    if (!At(key).is_boolean())
      return Fail(absl::StrCat("'", key, "' must be a boolean"), key), std::nullopt;
    return At(key).get<bool>();
  }
  std::optional<double> Number(const char* key, double lo, double hi) {
    if (!Has(key)) return std::nullopt;
    const Json& v = At(key);
    if (!v.is_number())
      return Fail(absl::StrCat("'", key, "' must be a number"), key), std::nullopt;
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      return Fail(absl::StrCat("'", key, "' must be between ", lo, " and ", hi, ", got ", d), key),
             std::nullopt;
    }
    return d;
  }
  std::optional<int64_t> Integer(const char* key, int64_t lo, int64_t hi) {
    if (!Has(key)) return std::nullopt;
    const Json& v = At(key);
    if (!v.is_number_integer()) {
      return Fail(absl::StrCat("'", key, "' must be an integer"), key), std::nullopt;
    }
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(absl::StrCat("'", key, "' must be between ", lo, " and ", hi, ", got ",
                               v.get<uint64_t>()),
                  key),
             std::nullopt;
    }
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) {
      return Fail(absl::StrCat("'", key, "' must be between ", lo, " and ", hi, ", got ", i), key),
             std::nullopt;
    }
    return i;
  }
  std::optional<std::string> String(const char* key) {
    if (!Has(key)) return std::nullopt;
    if (!At(key).is_string())
      return Fail(absl::StrCat("'", key, "' must be a string"), key), std::nullopt;
    return At(key).get<std::string>();
  }

 private:
  const Json& body_;
  std::optional<ApiError> error_;
};

// A logit_bias key: a token id in decimal digits only (no sign, blank or exponent), at most
// INT32_MAX as everywhere else.
std::optional<uint32_t> TokenIdKey(const std::string& key) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  uint64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  if (id > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) return std::nullopt;
  return static_cast<uint32_t>(id);
}

void ParseSampling(Fields& f, SamplingRequest& s, bool is_chat) {
  if (auto v = f.Number("temperature", 0, 2)) s.temperature = static_cast<float>(*v);
  if (auto v = f.Number("top_p", 0, 1)) {
    if (*v == 0) f.Fail("'top_p' must be greater than 0", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = f.Integer("top_k", -1, std::numeric_limits<int32_t>::max())) {
    s.top_k = static_cast<int32_t>(*v);
  }
  if (auto v = f.Number("min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = f.Number("presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = f.Number("frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.Number("repetition_penalty", 0, 10)) {
    if (*v == 0) f.Fail("'repetition_penalty' must be greater than 0", "repetition_penalty");
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = f.Integer("seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*v);
  }
  const char* max_key =
      is_chat && f.Has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto v = f.Integer(max_key, is_chat ? 1 : 0, std::numeric_limits<int32_t>::max())) {
    s.max_tokens = static_cast<uint32_t>(*v);
  }
  if (auto v = f.Integer("min_tokens", 0, std::numeric_limits<int32_t>::max())) {
    s.min_tokens = static_cast<uint32_t>(*v);
  }
  if (auto v = f.Bool("ignore_eos")) s.ignore_eos = *v;
  if (auto v = f.Bool("include_stop_str_in_output")) s.include_stop_str_in_output = *v;
  if (auto v = f.Bool("skip_special_tokens")) s.skip_special_tokens = *v;
  if (f.Has("stop")) {
    const Json& stop = f.At("stop");
    if (stop.is_string()) {
      s.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array() && stop.size() <= kMaxStopStrings) {
      for (const Json& item : stop) {
        if (!item.is_string())
          return f.Fail("'stop' must be a string or a list of strings", "stop");
        s.stop.push_back(item.get<std::string>());
      }
    } else {
      return f.Fail(absl::StrCat("'stop' must be a string or a list of at most ", kMaxStopStrings,
                                 " strings"),
                    "stop");
    }
    for (const std::string& stop_string : s.stop) {
      if (stop_string.empty()) return f.Fail("'stop' strings must not be empty", "stop");
    }
  }
  if (f.Has("stop_token_ids")) {
    const Json& ids = f.At("stop_token_ids");
    if (!ids.is_array())
      return f.Fail("'stop_token_ids' must be a list of integers", "stop_token_ids");
    for (const Json& id : ids) {
      if (!id.is_number_unsigned()) {
        return f.Fail("'stop_token_ids' must be a list of non-negative integers", "stop_token_ids");
      }
      if (id.get<uint64_t>() > std::numeric_limits<int32_t>::max()) {
        return f.Fail(absl::StrCat("'stop_token_ids' entry ", id.get<uint64_t>(),
                                   " is not a token id"),
                      "stop_token_ids");
      }
      s.stop_token_ids.push_back(id.get<uint32_t>());
    }
  }
  if (f.Has("logit_bias")) {
    const Json& bias = f.At("logit_bias");
    if (!bias.is_object()) return f.Fail("'logit_bias' must be an object", "logit_bias");
    for (const auto& [key, value] : bias.items()) {
      const std::optional<uint32_t> id = TokenIdKey(key);
      if (!id) {
        return f.Fail(absl::StrCat("'logit_bias' key '", key, "' is not a token id"), "logit_bias");
      }
      if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
        return f.Fail("'logit_bias' values must be numbers between -100 and 100", "logit_bias");
      }
      s.logit_bias.emplace_back(*id, value.get<float>());
    }
  }
}

// The "function" object of a tool or a tool call, when it names its function; else null.
const Json* NamedFunction(const Json& holder) {
  const auto fn = holder.find("function");
  if (fn == holder.end() || !fn->is_object() || !fn->contains("name") ||
      !fn->at("name").is_string()) {
    return nullptr;
  }
  return &*fn;
}

// tools[i]: {"type": "function", "function": {"name": string, ...}} (OpenAI's only tool type).
bool IsFunctionTool(const Json& tool) {
  return tool.is_object() && tool.value("type", Json()) == "function" &&
         NamedFunction(tool) != nullptr;
}

// An assistant message's tool_calls[j]: a function call whose arguments are a JSON string (as
// OpenAI sends them back) or an object.
bool IsFunctionCall(const Json& call) {
  if (!call.is_object() || call.value("type", Json("function")) != "function") return false;
  const Json* fn = NamedFunction(call);
  if (fn == nullptr) return false;
  const auto args = fn->find("arguments");
  return args == fn->end() || args->is_string() || args->is_object();
}

void ParseCommon(Fields& f, GenerationRequest& r) {
  if (auto v = f.String("model")) r.model = *v;
  if (auto v = f.Integer("n", 1, kMaxN)) r.n = static_cast<uint32_t>(*v);
  if (auto v = f.Bool("stream")) r.stream = *v;
  if (f.Has("stream_options")) {
    const Json& o = f.At("stream_options");
    if (!o.is_object()) return f.Fail("'stream_options' must be an object", "stream_options");
    if (!r.stream)
      return f.Fail("'stream_options' is only allowed with stream=true", "stream_options");
    if (o.contains("include_usage")) {
      if (!o.at("include_usage").is_boolean()) {
        return f.Fail("'stream_options.include_usage' must be a boolean", "stream_options");
      }
      r.include_usage = o.at("include_usage").get<bool>();
    }
  }
  // best_of (vLLM takes it on both endpoints): only as many candidates as choices, since the
  // router returns every choice it runs. Checked only while no field failed (n among them):
  // one error is reported anyway.
  if (auto v = f.Integer("best_of", 1, kMaxN); v && !f.error() && *v != int64_t{r.n}) {
    return f.Fail("'best_of' different from 'n' is not supported", "best_of");
  }
  if (auto v = f.Integer("priority", -1000000, 1000000)) r.priority = static_cast<int32_t>(*v);
  if (auto v = f.String("user")) r.user = *v;
  if (auto v = f.Bool("return_tokens_as_token_ids")) r.return_tokens_as_token_ids = *v;
}

}  // namespace

ApiResult<Json> ParseJsonBody(const std::string& body) {
  // A bracket scan bounds the nesting before parsing, so hostile input never reaches the parser
  // or any recursive code (serialisation, templates) with a deep structure.
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      max_depth = std::max(max_depth, ++depth);
    else if (c == '}' || c == ']')
      --depth;
  }
  if (max_depth > kMaxJsonDepth) {
    return ApiError::Invalid(absl::StrCat("JSON nesting deeper than ", kMaxJsonDepth));
  }
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return ApiError::Invalid("request body is not valid JSON");
  if (!parsed.is_object()) return ApiError::Invalid("request body must be a JSON object");
  return parsed;
}

ApiResult<GenerationRequest> ParseChatRequest(const Json& body) {
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::kChat;
  Fields f(body);
  if (!f.Has("messages")) return ApiError::Invalid("'messages' is required", "messages");
  const Json& messages = f.At("messages");
  if (!messages.is_array() || messages.empty()) {
    return ApiError::Invalid("'messages' must be a non-empty list", "messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return ApiError::Invalid(param + " must be an object", param);
    if (!m.contains("role") || !m.at("role").is_string()) {
      return ApiError::Invalid(param + ".role must be a string", param + ".role");
    }
    const std::string role = m.at("role").get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer") {
      return ApiError::Invalid(absl::StrCat(param, ".role '", role,
                                            "' is not one of system, "
                                            "developer, user, assistant, tool"),
                               param + ".role");
    }
    if (m.contains("content")) {
      const Json& c = m.at("content");
      if (c.is_array()) {
        for (const Json& part : c) {
          if (!part.is_object() || !part.contains("type") || part.at("type") != "text" ||
              !part.contains("text") || !part.at("text").is_string()) {
            return ApiError::Invalid(param +
                                         ".content parts must be {\"type\": \"text\", "
                                         "\"text\": ...} (only text is supported)",
                                     param + ".content");
          }
        }
      } else if (!c.is_string() && !c.is_null()) {
        return ApiError::Invalid(param + ".content must be a string or a list of parts",
                                 param + ".content");
      }
    } else if (role != "assistant") {
      return ApiError::Invalid(param + ".content is required", param + ".content");
    }
    if (m.contains("tool_calls") && !m.at("tool_calls").is_null()) {
      const Json& calls = m.at("tool_calls");
      bool ok = role == "assistant" && calls.is_array();
      for (size_t j = 0; ok && j < calls.size(); ++j) ok = IsFunctionCall(calls[j]);
      if (!ok) {
        return ApiError::Invalid(param +
                                     ".tool_calls must be an assistant's list of {\"type\": "
                                     "\"function\", \"function\": {\"name\": ..., "
                                     "\"arguments\": ...}}",
                                 param + ".tool_calls");
      }
    }
  }
  r.messages = messages;
  if (f.Has("tools")) {
    const Json& tools = f.At("tools");
    if (!tools.is_array()) return ApiError::Invalid("'tools' must be a list", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      if (!IsFunctionTool(tools[i])) {
        return ApiError::Invalid(
            absl::StrCat("tools[", i,
                         "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}"),
            "tools");
      }
    }
    r.tools = tools;
  }
  if (f.Has("tool_choice")) {
    // The template sees the tools; decoding is not constrained to call one.
    const Json& choice = f.At("tool_choice");
    if (r.tools.is_null()) {  // as OpenAI and vLLM
      return ApiError::Invalid("'tool_choice' is only allowed when 'tools' are given",
                               "tool_choice");
    }
    if (choice != "none" && choice != "auto") {
      return ApiError::Invalid(choice == "required" || choice.is_object()
                                   ? "only tool_choice \"auto\" and \"none\" are supported"
                                   : "'tool_choice' must be \"none\", \"auto\", \"required\" "
                                     "or a named function",
                               "tool_choice");
    }
  }
  if (auto echo = f.Bool("echo"); echo && *echo) {
    return ApiError::Invalid("'echo' is not supported for chat completions", "echo");
  }
  if (f.Has("chat_template")) {
    return ApiError::Invalid(
        "a request's own 'chat_template' is not supported: the model's is used", "chat_template");
  }
  r.chat_template_kwargs = Json::object();
  if (f.Has("chat_template_kwargs")) {
    if (!f.At("chat_template_kwargs").is_object()) {
      return ApiError::Invalid("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    }
    r.chat_template_kwargs = f.At("chat_template_kwargs");
  }
  if (auto effort = f.String("reasoning_effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high") {
      return ApiError::Invalid("'reasoning_effort' must be low, medium or high",
                               "reasoning_effort");
    }
    r.chat_template_kwargs["reasoning_effort"] = *effort;
  }
  if (auto v = f.Bool("add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = f.Bool("add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = f.Bool("continue_final_message"); v && *v) {
    return ApiError::Invalid("'continue_final_message' is not supported", "continue_final_message");
  }
  if (auto v = f.Bool("logprobs")) r.logprobs = *v;
  if (auto v = f.Integer("top_logprobs", 0, kMaxTopLogprobs)) {
    if (!r.logprobs) {
      return ApiError::Invalid("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    }
    r.top_logprobs = static_cast<uint32_t>(*v);
  }
  if (f.Has("response_format")) {
    const Json& rf = f.At("response_format");
    if (!rf.is_object() || rf.value("type", "") != "text") {
      return ApiError::Invalid("only response_format {\"type\": \"text\"} is supported",
                               "response_format");
    }
  }
  ParseSampling(f, r.sampling, /*is_chat=*/true);
  ParseCommon(f, r);
  if (f.error()) return *f.error();
  return r;
}

ApiResult<TokenizePromptRequest> ParseTokenizePromptRequest(const Json& body) {
  TokenizePromptRequest r;
  Fields f(body);
  if (auto v = f.String("prompt")) r.prompt = *v;
  r.model = f.String("model");
  if (auto v = f.Bool("add_special_tokens")) r.add_special_tokens = *v;
  if (f.error()) return *f.error();
  return r;
}

ApiResult<GenerationRequest> ParseCompletionRequest(const Json& body) {
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::kCompletion;
  Fields f(body);
  if (!f.Has("prompt")) return ApiError::Invalid("'prompt' is required", "prompt");
  const Json& prompt = f.At("prompt");
  auto token_list = [](const Json& j, std::vector<uint32_t>& out) {
    for (const Json& t : j) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() > std::numeric_limits<int32_t>::max()) {
        return false;
      }
      out.push_back(t.get<uint32_t>());
    }
    return true;
  };
  const char* kPromptShape =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (prompt.is_string()) {
    r.prompts.emplace_back(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt[0].is_string()) {
      for (const Json& p : prompt) {
        if (!p.is_string()) return ApiError::Invalid(kPromptShape, "prompt");
        r.prompts.emplace_back(p.get<std::string>());
      }
    } else if (prompt[0].is_array()) {
      for (const Json& p : prompt) {
        std::vector<uint32_t> ids;
        if (!p.is_array() || !token_list(p, ids)) return ApiError::Invalid(kPromptShape, "prompt");
        r.prompts.emplace_back(std::move(ids));
      }
    } else {
      std::vector<uint32_t> ids;
      if (!token_list(prompt, ids)) return ApiError::Invalid(kPromptShape, "prompt");
      r.prompts.emplace_back(std::move(ids));
    }
  } else {
    return ApiError::Invalid(kPromptShape, "prompt");
  }
  if (r.prompts.size() > 64) return ApiError::Invalid("at most 64 prompts per request", "prompt");
  if (f.Has("suffix")) {
    return ApiError::Invalid("'suffix' (fill-in-the-middle) is not supported", "suffix");
  }
  if (auto v = f.Bool("echo")) r.echo = *v;
  r.add_special_tokens = f.Bool("add_special_tokens").value_or(true);
  if (auto v = f.Integer("logprobs", 0, kMaxTopLogprobs)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<uint32_t>(*v);
  }
  ParseSampling(f, r.sampling, /*is_chat=*/false);
  if (!r.sampling.max_tokens) r.sampling.max_tokens = 16;  // the OpenAI completions default
  ParseCommon(f, r);
  if (f.error()) return *f.error();
  return r;
}

}  // namespace xserv::router
