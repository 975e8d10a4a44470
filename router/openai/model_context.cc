#include "router/openai/model_context.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace xserv::router {

absl::StatusOr<std::shared_ptr<ModelContext>> ModelContext::Load(const std::string& model_dir,
                                                                 const std::string& served_name) {
  auto ctx = std::make_shared<ModelContext>();
  ctx->served_name = served_name.empty()
                         ? std::filesystem::path(model_dir).lexically_normal().filename().string()
                         : served_name;
  if (ctx->served_name.empty()) {
    ctx->served_name =
        std::filesystem::path(model_dir).lexically_normal().parent_path().filename().string();
  }
  auto tokenizer = tokenizer::Tokenizer::FromFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  ctx->tokenizer = std::move(*tokenizer);
  ctx->chat_template = chat_template::ChatTemplate::FromModelDir(model_dir);
  if (absl::IsNotFound(ctx->chat_template.status())) {
    spdlog::warn("{} has no chat template: chat completions are refused", model_dir);
  } else if (!ctx->chat_template.ok()) {
    // A deployment error, not the client's: logged loudly, and every chat request says it.
    spdlog::error("the chat template of {} does not load: {} (chat completions fail until it "
                  "is fixed; completions are served)",
                  model_dir, std::string(ctx->chat_template.status().message()));
  }
  auto generation = LoadGenerationConfigIfPresent(model_dir + "/generation_config.json");
  if (!generation.ok()) return generation.status();
  if (*generation) ctx->generation = **generation;
  std::ifstream config_file(model_dir + "/config.json");
  std::stringstream text;
  text << config_file.rdbuf();
  const nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, false);
  if (config.is_object()) ctx->model_type = config.value("model_type", "");
  if (ctx->model_type == "qwen3" || ctx->model_type == "qwen3_moe") {
    ctx->reasoning_format = output::ReasoningFormat::kQwen3;
  } else if (ctx->model_type == "gpt_oss") {
    ctx->reasoning_format = output::ReasoningFormat::kHarmony;
  }
  ctx->created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return ctx;
}

}  // namespace xserv::router
