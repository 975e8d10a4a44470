#include "common/chat_template/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

using Json = nlohmann::ordered_json;

// transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order.
constexpr std::string_view kSpecialTokenKeys[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The single place where JSON text is parsed; nlohmann reports errors as a discarded value
// instead of throwing when allow_exceptions is false.
absl::StatusOr<Json> ParseJson(const std::string& text, const std::string& what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("invalid JSON in ", what));
  return j;
}

// A special token is a string or an AddedToken object {"content": "..."}.
std::optional<std::string> TokenContent(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return it->get<std::string>();
  }
  return std::nullopt;
}

void CollectSpecialTokens(const Json& config, Json* out) {
  if (!config.is_object()) return;
  for (std::string_view key : kSpecialTokenKeys) {
    std::string k(key);
    if (out->contains(k)) continue;
    auto it = config.find(k);
    if (it == config.end()) continue;
    if (auto content = TokenContent(*it)) (*out)[k] = *content;
  }
  auto extra = config.find("additional_special_tokens");
  if (!out->contains("additional_special_tokens") && extra != config.end() && extra->is_array() &&
      !extra->empty()) {
    Json list = Json::array();
    for (const auto& t : *extra) {
      if (auto content = TokenContent(t)) list.push_back(*content);
    }
    (*out)["additional_special_tokens"] = std::move(list);
  }
}

absl::StatusOr<Value> ToValue(const Json& j, std::string_view what) {
  auto v = ValueFromJson(j);
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": ", v.status().message()));
  }
  return v;
}

// vLLM's "string" content format: a list of only text parts becomes the texts joined by "\n",
// and a null or missing content (any role) becomes "".
Json FlattenContent(const Json& message) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {  // e.g. an assistant turn of only tool calls
    Json copy = message;
    copy["content"] = "";
    return copy;
  }
  if (!it->is_array()) return message;
  std::string text;
  bool first = true;
  for (const auto& part : *it) {
    if (!part.is_object()) return message;
    auto type = part.find("type");
    auto t = part.find("text");
    if (type == part.end() || *type != "text" || t == part.end() || !t->is_string()) {
      return message;
    }
    if (!first) text += "\n";
    first = false;
    text += t->get<std::string>();
  }
  Json copy = message;
  copy["content"] = text;
  return copy;
}

Json ParseToolArguments(const Json& message) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return message;
  Json copy = message;
  for (auto& call : copy["tool_calls"]) {
    if (!call.is_object() || !call.contains("function")) continue;
    Json& fn = call["function"];
    if (!fn.is_object() || !fn.contains("arguments") || !fn["arguments"].is_string()) continue;
    Json parsed = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) fn["arguments"] = std::move(parsed);
  }
  return copy;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromModelDir(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  Json config = Json::object();
  if (auto text = ReadFile(dir / "tokenizer_config.json")) {
    ASSIGN_OR_RETURN(config, ParseJson(*text, "tokenizer_config.json"));
  }
  std::optional<std::string> override_template = ReadFile(dir / "chat_template.jinja");
  if (!override_template) {
    if (auto text = ReadFile(dir / "chat_template.json")) {
      ASSIGN_OR_RETURN(Json j, ParseJson(*text, "chat_template.json"));
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
        override_template = j["chat_template"].get<std::string>();
      }
    }
  }
  Json tokens = Json::object();
  CollectSpecialTokens(config, &tokens);
  if (auto text = ReadFile(dir / "special_tokens_map.json")) {
    ASSIGN_OR_RETURN(Json map, ParseJson(*text, "special_tokens_map.json"));
    CollectSpecialTokens(map, &tokens);
  }
  ASSIGN_OR_RETURN(ChatTemplate ct, FromTokenizerConfig(config, override_template));
  ct.special_tokens_ = std::move(tokens);
  return ct;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(
    const Json& tokenizer_config, const std::optional<std::string>& template_override) {
  ChatTemplate ct;
  CollectSpecialTokens(tokenizer_config, &ct.special_tokens_);
  std::vector<std::pair<std::string, std::string>> sources;
  if (template_override) {
    sources.emplace_back("default", *template_override);
  } else {
    auto it = tokenizer_config.is_object() ? tokenizer_config.find("chat_template")
                                           : tokenizer_config.end();
    if (it == tokenizer_config.end() || it->is_null()) {
      return absl::NotFoundError("the model has no chat template");
    }
    if (it->is_string()) {
      sources.emplace_back("default", it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& entry : *it) {
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
            !entry.contains("template") || !entry["template"].is_string()) {
          return absl::InvalidArgumentError(
              "chat_template list entries must be {\"name\": str, \"template\": str}");
        }
        sources.emplace_back(entry["name"].get<std::string>(),
                             entry["template"].get<std::string>());
      }
    } else {
      return absl::InvalidArgumentError("chat_template must be a string or a list");
    }
  }
  for (auto& [name, source] : sources) {
    auto parsed = Template::Parse(source);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template '", name, "': ", parsed.status().message()));
    }
    ct.templates_.emplace_back(name, *std::move(parsed));
  }
  return ct;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromString(std::string_view source,
                                                      const Json& special_tokens) {
  ChatTemplate ct;
  ASSIGN_OR_RETURN(auto parsed, Template::Parse(source));
  ct.templates_.emplace_back("default", std::move(parsed));
  if (special_tokens.is_object()) ct.special_tokens_ = special_tokens;
  return ct;
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : templates_) names.push_back(name);
  return names;
}

absl::StatusOr<std::shared_ptr<const Template>> ChatTemplate::Select(
    const ChatRenderRequest& request) const {
  auto find = [&](std::string_view name) -> std::shared_ptr<const Template> {
    for (const auto& [n, t] : templates_) {
      if (n == name) return t;
    }
    return nullptr;
  };
  if (!request.template_name.empty()) {
    if (auto t = find(request.template_name)) return t;
    return absl::NotFoundError(
        absl::StrCat("the model has no chat template named '", request.template_name, "'"));
  }
  if (request.tools.has_value()) {
    if (auto t = find("tool_use")) return t;
  }
  if (auto t = find("default")) return t;
  return absl::NotFoundError("the model has no default chat template");
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRenderRequest& request,
                                                 const RenderOptions& options) const {
  ASSIGN_OR_RETURN(std::shared_ptr<const Template> tmpl, Select(request));
  if (!request.messages.is_array()) return absl::InvalidArgumentError("messages must be a list");
  if (!request.kwargs.is_object()) {
    return absl::InvalidArgumentError("chat template kwargs must be an object");
  }
  Json messages = request.messages;
  if (request.flatten_text_content || request.parse_tool_arguments) {
    for (auto& m : messages) {
      if (!m.is_object()) continue;
      if (request.flatten_text_content) m = FlattenContent(m);
      if (request.parse_tool_arguments) m = ParseToolArguments(m);
    }
  }
  // Same variables, same order as transformers: render(messages=..., tools=...,
  // documents=..., add_generation_prompt=..., **{**special_tokens_map, **kwargs}).
  Dict vars;
  ASSIGN_OR_RETURN(Value msgs, ToValue(messages, "messages"));
  vars.Set(Value::String("messages"), std::move(msgs));
  Value tools = Value::None();
  if (request.tools.has_value() && !request.tools->is_null()) {
    ASSIGN_OR_RETURN(tools, ToValue(*request.tools, "tools"));
  }
  vars.Set(Value::String("tools"), std::move(tools));
  Value documents = Value::None();
  if (request.documents.has_value() && !request.documents->is_null()) {
    ASSIGN_OR_RETURN(documents, ToValue(*request.documents, "documents"));
  }
  vars.Set(Value::String("documents"), std::move(documents));
  vars.Set(Value::String("add_generation_prompt"), Value::Bool(request.add_generation_prompt));
  for (const auto& [key, value] : special_tokens_.items()) {
    ASSIGN_OR_RETURN(Value v, ToValue(value, key));
    vars.Set(Value::String(key), std::move(v));
  }
  for (const auto& [key, value] : request.kwargs.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template kwarg '", key, "' conflicts with a reserved variable"));
    }
    ASSIGN_OR_RETURN(Value v, ToValue(value, key));
    vars.Set(Value::String(key), std::move(v));
  }
  return tmpl->Render(Value::FromDict(std::move(vars)), options);
}

}  // namespace xserv::chat_template
