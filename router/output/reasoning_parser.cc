#include "router/output/reasoning_parser.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "router/output/harmony_parser.h"
#include "router/output/qwen3_reasoning_parser.h"

namespace xserv::router::output {

absl::StatusOr<ReasoningFormat> ParseReasoningFormat(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "none" || lower.empty()) return ReasoningFormat::kNone;
  if (lower == "qwen3" || lower == "deepseek_r1") return ReasoningFormat::kQwen3;
  if (lower == "harmony" || lower == "gpt_oss" || lower == "openai_gptoss") {
    return ReasoningFormat::kHarmony;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reasoning format \"", std::string(name), "\" (expected none, qwen3 or harmony)"));
}

ReasoningFormat ReasoningFormatForModelType(std::string_view model_type) {
  if (model_type == "qwen3" || model_type == "qwen3_moe" || model_type == "qwen3_next") {
    return ReasoningFormat::kQwen3;
  }
  if (model_type == "gpt_oss") return ReasoningFormat::kHarmony;
  return ReasoningFormat::kNone;
}

std::string_view ReasoningFormatName(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kNone:
      return "none";
    case ReasoningFormat::kQwen3:
      return "qwen3";
    case ReasoningFormat::kHarmony:
      return "harmony";
  }
  return "none";
}

absl::StatusOr<std::unique_ptr<ReasoningParser>> MakeReasoningParser(
    ReasoningFormat format, const tokenizer::Tokenizer& tokenizer,
    const ReasoningParserOptions& options) {
  switch (format) {
    case ReasoningFormat::kNone:
      return std::make_unique<PassThroughParser>();
    case ReasoningFormat::kQwen3: {
      absl::StatusOr<Qwen3ReasoningParser::Markers> markers =
          Qwen3ReasoningParser::ResolveMarkers(tokenizer);
      if (!markers.ok()) return markers.status();
      return std::make_unique<Qwen3ReasoningParser>(std::move(*markers),
                                                    options.starts_in_reasoning);
    }
    case ReasoningFormat::kHarmony: {
      absl::StatusOr<HarmonyParser::Markers> markers = HarmonyParser::ResolveMarkers(tokenizer);
      if (!markers.ok()) return markers.status();
      return std::make_unique<HarmonyParser>(*markers);
    }
  }
  return absl::InvalidArgumentError("unknown reasoning format");
}

}  // namespace xserv::router::output
