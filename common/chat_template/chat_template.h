// ChatTemplate: the model's chat template(s) plus special tokens, rendering OpenAI-style
// conversations into a prompt exactly as transformers' apply_chat_template does.
//
// Loading: `chat_template.jinja` in the model dir wins, then `chat_template.json`, then
// `tokenizer_config.json["chat_template"]` (a string, or a list of {name, template}).
// Special tokens (bos_token, eos_token, ...) come from tokenizer_config.json (plain strings or
// AddedToken objects with "content"), completed by special_tokens_map.json.
//
// Ownership and threading: immutable after construction; Render() is const and may be called
// from any number of threads at once. Copying shares the parsed templates.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/template.h"
#include "nlohmann/json.hpp"

namespace xserv::chat_template {

struct ChatRenderRequest {
  // OpenAI-style messages as received. Parse request bodies as ordered_json: key order is
  // visible to templates (tool schemas are printed with tojson) and nlohmann::json sorts keys.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // nullopt renders as None
  std::optional<nlohmann::ordered_json> documents;  // nullopt renders as None
  bool add_generation_prompt = false;
  // chat_template_kwargs (enable_thinking, reasoning_effort, ...): become top-level template
  // variables and override special tokens of the same name, as in transformers.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // Named template to use; empty picks "tool_use" when tools are given and it exists, else
  // "default" (transformers' rule).
  std::string template_name;
  // Serving conveniences, off by default so output stays byte-identical to transformers:
  // replace a content list made only of text parts by the texts joined with "\n", and a null or
  // missing content by "" (vLLM's "string" content format: templates may test `'x' in
  // message.content`), and parse JSON-string tool-call arguments into objects.
  bool flatten_text_content = false;
  bool parse_tool_arguments = false;
};

class ChatTemplate {
 public:
  static absl::StatusOr<ChatTemplate> FromModelDir(const std::string& model_dir);
  // `tokenizer_config` is the parsed tokenizer_config.json; `template_override` (e.g. the
  // contents of chat_template.jinja) replaces its chat_template when set.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(
      const nlohmann::ordered_json& tokenizer_config,
      const std::optional<std::string>& template_override = std::nullopt);
  // One template named "default"; `special_tokens` maps names such as "bos_token" to strings.
  static absl::StatusOr<ChatTemplate> FromString(
      std::string_view source,
      const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  absl::StatusOr<std::string> Render(const ChatRenderRequest& request,
                                     const RenderOptions& options = {}) const;

  // Special-token variables passed to every render, e.g. {"bos_token": "<s>"}.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  std::vector<std::string> template_names() const;

 private:
  ChatTemplate() = default;
  absl::StatusOr<std::shared_ptr<const Template>> Select(const ChatRenderRequest& request) const;

  std::vector<std::pair<std::string, std::shared_ptr<const Template>>> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace xserv::chat_template
