// ModelContext: everything the router knows about the served model, loaded once at start-up from
// the model directory (tokenizer, chat template, generation defaults) and completed by the
// workers' Info (context length, vocabulary, EOS ids).
//
// Immutable after Load(); shared read-only by every request handler thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/model_config/generation_config.h"
#include "common/tokenizer/tokenizer.h"
#include "router/output/reasoning_parser.h"

namespace xserv::router {

struct ModelContext {
  std::string served_name;
  std::string model_type;  // config.json model_type
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // NotFound: the model has none (chat completions refused, 400); another error: it has one that
  // does not load, a syntax error or a malformed tokenizer_config entry (chat fails, 500).
  absl::StatusOr<chat_template::ChatTemplate> chat_template =
      absl::NotFoundError("no chat template loaded");
  GenerationConfig generation;  // sampling defaults applied when a request omits them
  output::ReasoningFormat reasoning_format = output::ReasoningFormat::kNone;
  int32_t max_context = 0;  // prompt + completion tokens, from the workers
  int32_t vocab_size = 0;
  std::vector<uint32_t> eos_token_ids;
  int64_t created_unix = 0;  // for /v1/models

  // Reads tokenizer.json, the chat template (optional) and generation_config.json (optional)
  // from `model_dir`, and model_type from config.json.
  static absl::StatusOr<std::shared_ptr<ModelContext>> Load(const std::string& model_dir,
                                                            const std::string& served_name);
};

}  // namespace xserv::router
