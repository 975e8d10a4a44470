#include "common/model_config/generation_config.h"

#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/model_config/json_fields.h"
#include "common/status.h"

namespace xserv {
namespace {

using config_json::JsonFields;

absl::StatusOr<GenerationConfig> ParseFields(const JsonFields& fields) {
  GenerationConfig out;
  ASSIGN_OR_RETURN(out.bos_token_id, fields.Int("bos_token_id"));
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> eos, fields.IntOrIntList("eos_token_id"));
  out.eos_token_ids = eos.value_or(std::vector<int64_t>{});
  ASSIGN_OR_RETURN(out.pad_token_id, fields.Int("pad_token_id"));
  ASSIGN_OR_RETURN(out.do_sample, fields.Bool("do_sample"));
  ASSIGN_OR_RETURN(out.temperature, fields.Number("temperature"));
  ASSIGN_OR_RETURN(out.top_p, fields.Number("top_p"));
  ASSIGN_OR_RETURN(out.top_k, fields.Int("top_k"));
  ASSIGN_OR_RETURN(out.min_p, fields.Number("min_p"));
  ASSIGN_OR_RETURN(out.repetition_penalty, fields.Number("repetition_penalty"));
  ASSIGN_OR_RETURN(out.max_new_tokens, fields.Int("max_new_tokens"));

  if (out.temperature && !(std::isfinite(*out.temperature) && *out.temperature >= 0)) {
    return fields.FieldError("temperature", absl::StrCat("must be >= 0, got ", *out.temperature));
  }
  if (out.top_p && !(*out.top_p > 0 && *out.top_p <= 1)) {
    return fields.FieldError("top_p", absl::StrCat("must be in (0, 1], got ", *out.top_p));
  }
  if (out.top_k && *out.top_k < 0) {
    return fields.FieldError("top_k", absl::StrCat("must be >= 0, got ", *out.top_k));
  }
  if (out.min_p && !(*out.min_p >= 0 && *out.min_p <= 1)) {
    return fields.FieldError("min_p", absl::StrCat("must be in [0, 1], got ", *out.min_p));
  }
  if (out.repetition_penalty &&
      !(std::isfinite(*out.repetition_penalty) && *out.repetition_penalty > 0)) {
    return fields.FieldError("repetition_penalty",
                             absl::StrCat("must be > 0, got ", *out.repetition_penalty));
  }
  if (out.max_new_tokens && *out.max_new_tokens < 0) {
    return fields.FieldError("max_new_tokens",
                             absl::StrCat("must be >= 0, got ", *out.max_new_tokens));
  }
  for (int64_t id : out.eos_token_ids) {
    if (id < 0) return fields.FieldError("eos_token_id", absl::StrCat("negative id ", id));
  }
  if (out.bos_token_id && *out.bos_token_id < 0) {
    return fields.FieldError("bos_token_id", absl::StrCat("negative id ", *out.bos_token_id));
  }
  return out;
}

}  // namespace

absl::StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json_text,
                                                       std::string_view label) {
  ASSIGN_OR_RETURN(const nlohmann::json json, config_json::ParseJsonObject(json_text, label));
  try {  // defensive: typed access never throws, but this is the module's adapter boundary
    return ParseFields(JsonFields(json, std::string(label)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": ", e.what()));
  }
}

absl::StatusOr<std::optional<GenerationConfig>> LoadGenerationConfigIfPresent(
    const std::string& path) {
  std::filesystem::path file(path);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "generation_config.json";
  if (!std::filesystem::exists(file, ec)) return std::optional<GenerationConfig>();
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file.string(), ": cannot open"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSIGN_OR_RETURN(GenerationConfig config, ParseGenerationConfig(text, file.string()));
  return std::optional<GenerationConfig>(std::move(config));
}

}  // namespace xserv
