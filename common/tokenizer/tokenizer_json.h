// The one adapter between tokenizer.json and the tokenizer's components: parses the JSON
// (nlohmann, whose exceptions never leave this adapter) and builds the normalizer,
// pre-tokenizer, BPE model, added tokens, decoder and post-processor facts.
//
// Unsupported component types are refused with an error naming the type and the section, so a
// model whose tokenizer we cannot reproduce exactly is rejected at load, not at the first request.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/added_vocabulary.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pre_tokenizer.h"

namespace xserv::tokenizer {

struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;      // never null; identity when absent
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // null when absent: the whole text is one piece
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<Decoder> decoder;  // never null; no steps when absent (join with spaces)
  // The first token of TemplateProcessing's "single" template when it is a special token (e.g.
  // Llama 3's <|begin_of_text|>): what HF would prepend with add_special_tokens=True.
  std::optional<uint32_t> template_bos_id;
};

absl::StatusOr<TokenizerParts> ParseTokenizerJson(std::string_view json);

}  // namespace xserv::tokenizer
