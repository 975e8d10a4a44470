#include "common/tokenizer/tokenizer_json.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace xserv::tokenizer {
namespace {

using Json = nlohmann::json;

absl::Status Unsupported(std::string_view section, const std::string& type) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported ",
                                               std::string(section), " type '", type, "'"));
}

std::string TypeOf(const Json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool BoolOr(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::optional<std::string> OptionalString(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// HF Pattern: {"Regex": "..."} or {"String": "..."}.
absl::StatusOr<std::shared_ptr<const Regex>> ParsePattern(const Json& j, std::string_view where) {
  if (j.is_object()) {
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      ASSIGN_OR_RETURN(auto regex, Regex::Compile(it->get<std::string>(), Regex::Kind::kRegex));
      return std::shared_ptr<const Regex>(std::move(regex));
    }
    if (auto it = j.find("String"); it != j.end() && it->is_string()) {
      ASSIGN_OR_RETURN(auto regex, Regex::Compile(it->get<std::string>(), Regex::Kind::kLiteral));
      return std::shared_ptr<const Regex>(std::move(regex));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: ", std::string(where), " pattern must be {Regex|String}"));
}

absl::Status ParseNormalizer(const Json& j, std::vector<UnicodeForm>* forms) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "NFC") {
    forms->push_back(UnicodeForm::kNfc);
  } else if (type == "NFD") {
    forms->push_back(UnicodeForm::kNfd);
  } else if (type == "NFKC") {
    forms->push_back(UnicodeForm::kNfkc);
  } else if (type == "NFKD") {
    forms->push_back(UnicodeForm::kNfkd);
  } else if (type == "Sequence") {
    for (const Json& child : j.at("normalizers")) RETURN_IF_ERROR(ParseNormalizer(child, forms));
  } else {
    return Unsupported("normalizer", type);
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: unknown split behavior '",
                                                 name, "'"));
}

absl::StatusOr<PreTokenizerStep> RegexStep(std::string_view pattern, SplitBehavior behavior,
                                           bool invert) {
  ASSIGN_OR_RETURN(auto regex, Regex::Compile(pattern, Regex::Kind::kRegex));
  PreTokenizerStep step;
  step.regex = std::move(regex);
  step.behavior = behavior;
  step.invert = invert;
  return step;
}

absl::Status ParsePreTokenizer(const Json& j, std::vector<PreTokenizerStep>* steps) {
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    for (const Json& child : j.at("pretokenizers")) RETURN_IF_ERROR(ParsePreTokenizer(child, steps));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = BoolOr(j, "add_prefix_space", true);
    if (BoolOr(j, "use_regex", true)) {
      ASSIGN_OR_RETURN(auto regex, Regex::Compile(PreTokenizer::Gpt2Pattern(), Regex::Kind::kRegex));
      step.regex = std::move(regex);
    }
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(auto regex, ParsePattern(j.at("pattern"), "Split"));
    ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j.at("behavior").get<std::string>()));
    PreTokenizerStep step;
    step.regex = std::move(regex);
    step.behavior = behavior;
    step.invert = BoolOr(j, "invert", false);
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  // The remaining HF pre-tokenizers are character-class splits, expressed as regexes.
  if (type == "Digits") {
    const bool individual = BoolOr(j, "individual_digits", false);
    ASSIGN_OR_RETURN(auto step, RegexStep("\\p{N}", individual ? SplitBehavior::kIsolated
                                                                 : SplitBehavior::kContiguous,
                                          false));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Whitespace") {
    ASSIGN_OR_RETURN(auto step, RegexStep("\\w+|[^\\w\\s]+", SplitBehavior::kRemoved, true));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "WhitespaceSplit") {
    ASSIGN_OR_RETURN(auto step, RegexStep("\\s", SplitBehavior::kRemoved, false));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return Unsupported("pre_tokenizer", type);
}

absl::Status ParseDecoder(const Json& j, std::vector<DecoderStep>* steps) {
  const std::string type = TypeOf(j);
  DecoderStep step;
  if (type == "Sequence") {
    for (const Json& child : j.at("decoders")) RETURN_IF_ERROR(ParseDecoder(child, steps));
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    const std::string content = j.at("content").get<std::string>();
    if (content.empty()) return absl::InvalidArgumentError("tokenizer.json: empty Strip content");
    step.strip_content = DecodeUtf8Char(content, 0).code_point;
    step.strip_start = j.at("start").get<size_t>();
    step.strip_stop = j.at("stop").get<size_t>();
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    ASSIGN_OR_RETURN(step.pattern, ParsePattern(j.at("pattern"), "Replace"));
    step.content = j.at("content").get<std::string>();
  } else {
    return Unsupported("decoder", type);
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ParseMerges(const Json& merges, std::vector<std::pair<std::string, std::string>>* out) {
  out->reserve(merges.size());
  for (const Json& m : merges) {
    if (m.is_array() && m.size() == 2) {
      out->emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    if (!m.is_string()) return absl::InvalidArgumentError("tokenizer.json: malformed BPE merge");
    const std::string& line = m.get_ref<const std::string&>();
    if (line.rfind("#version", 0) == 0) continue;  // header line of merges.txt, not a merge
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: BPE merge '", line, "' is not two space-separated tokens"));
    }
    out->emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BpeModel>> ParseModel(const Json& j) {
  const std::string type = TypeOf(j);
  if (type != "BPE" && !(type.empty() && j.contains("merges"))) return Unsupported("model", type);
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
    spdlog::warn("tokenizer: BPE dropout is ignored (encoding is deterministic)");
  }
  std::vector<std::pair<std::string, uint32_t>> vocab;
  const Json& vocab_json = j.at("vocab");
  vocab.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    vocab.emplace_back(it.key(), it.value().get<uint32_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (auto it = j.find("merges"); it != j.end()) RETURN_IF_ERROR(ParseMerges(*it, &merges));
  BpeOptions options;
  options.unk_token = OptionalString(j, "unk_token");
  options.continuing_subword_prefix = OptionalString(j, "continuing_subword_prefix");
  options.end_of_word_suffix = OptionalString(j, "end_of_word_suffix");
  options.fuse_unk = BoolOr(j, "fuse_unk", false);
  options.byte_fallback = BoolOr(j, "byte_fallback", false);
  options.ignore_merges = BoolOr(j, "ignore_merges", false);
  return BpeModel::Create(std::move(vocab), merges, std::move(options));
}

std::optional<uint32_t> FindTemplateBos(const Json& j) {
  if (j.is_null()) return std::nullopt;
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    for (const Json& child : j.at("processors")) {
      if (auto bos = FindTemplateBos(child)) return bos;
    }
    return std::nullopt;
  }
  if (type != "TemplateProcessing") return std::nullopt;
  const Json& single = j.at("single");
  if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) {
    return std::nullopt;
  }
  const std::string name = single[0]["SpecialToken"].at("id").get<std::string>();
  const Json& specials = j.at("special_tokens");
  auto it = specials.find(name);
  if (it == specials.end() || !it->contains("ids") || (*it)["ids"].empty()) return std::nullopt;
  return (*it)["ids"][0].get<uint32_t>();
}

absl::StatusOr<TokenizerParts> BuildParts(const Json& root) {
  TokenizerParts parts;
  std::vector<UnicodeForm> forms;
  if (auto it = root.find("normalizer"); it != root.end()) {
    RETURN_IF_ERROR(ParseNormalizer(*it, &forms));
  }
  parts.normalizer = std::make_unique<Normalizer>(std::move(forms));

  if (auto it = root.find("pre_tokenizer"); it != root.end() && !it->is_null()) {
    std::vector<PreTokenizerStep> steps;
    RETURN_IF_ERROR(ParsePreTokenizer(*it, &steps));
    parts.pre_tokenizer = std::make_unique<PreTokenizer>(std::move(steps));
  }

  ASSIGN_OR_RETURN(parts.model, ParseModel(root.at("model")));

  if (auto it = root.find("added_tokens"); it != root.end() && it->is_array()) {
    for (const Json& t : *it) {
      AddedToken token;
      token.id = t.at("id").get<uint32_t>();
      token.content = t.at("content").get<std::string>();
      token.special = BoolOr(t, "special", false);
      token.single_word = BoolOr(t, "single_word", false);
      token.lstrip = BoolOr(t, "lstrip", false);
      token.rstrip = BoolOr(t, "rstrip", false);
      token.normalized = BoolOr(t, "normalized", !token.special);
      parts.added_tokens.push_back(std::move(token));
    }
  }

  std::vector<DecoderStep> decoder_steps;
  if (auto it = root.find("decoder"); it != root.end() && !it->is_null()) {
    RETURN_IF_ERROR(ParseDecoder(*it, &decoder_steps));
  }
  parts.decoder = std::make_unique<Decoder>(std::move(decoder_steps));

  if (auto it = root.find("post_processor"); it != root.end()) {
    parts.template_bos_id = FindTemplateBos(*it);
  }
  return parts;
}

}  // namespace

absl::StatusOr<TokenizerParts> ParseTokenizerJson(std::string_view text) {
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a valid JSON object");
  }
  try {
    return BuildParts(root);
  } catch (const Json::exception& e) {
    // A missing key or a value of the wrong type somewhere in the file.
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: malformed: ", e.what()));
  }
}

}  // namespace xserv::tokenizer
