#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/utf8.h"
#include "spdlog/spdlog.h"

namespace xserv::tokenizer {
namespace {

// Buffers reused by every Encode on a thread.
struct EncodeScratch {
  std::vector<AddedSplit> raw_splits;
  std::vector<AddedSplit> normalized_splits;
  std::string normalized;
  PreTokenizeScratch pre_tokenize;
};

EncodeScratch& ThreadScratch() {
  thread_local EncodeScratch scratch;
  return scratch;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", file));
  std::ostringstream contents;
  contents << in.rdbuf();
  auto tokenizer = FromJson(contents.str());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(file, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json) {
  ASSIGN_OR_RETURN(TokenizerParts parts, ParseTokenizerJson(json));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(parts)));
}

Tokenizer::~Tokenizer() = default;

Tokenizer::Tokenizer(TokenizerParts parts)
    : normalizer_(std::move(parts.normalizer)),
      pre_tokenizer_(std::move(parts.pre_tokenizer)),
      model_(std::move(parts.model)),
      decoder_(std::move(parts.decoder)),
      added_tokens_(std::move(parts.added_tokens)),
      bos_id_(parts.template_bos_id) {
  id_end_ = model_->id_end();
  for (const AddedToken& t : added_tokens_) id_end_ = std::max(id_end_, t.id + 1);

  // Matchers: raw content for normalized=false, normalized content for normalized=true.
  std::vector<std::string> raw_patterns, normalized_patterns;
  std::vector<AddedToken> raw_tokens, normalized_tokens;
  absl::flat_hash_set<std::string> special_contents;
  added_index_.assign(id_end_, -1);
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& t = added_tokens_[i];
    added_index_[t.id] = static_cast<int32_t>(i);
    added_ids_.try_emplace(t.content, t.id);
    if (t.special) special_contents.insert(t.content);
    if (t.normalized) {
      std::string storage;
      normalized_patterns.emplace_back(normalizer_->Normalize(t.content, &storage));
      normalized_tokens.push_back(t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(t);
    }
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>(raw_patterns, std::move(raw_tokens));
  normalized_matcher_ =
      std::make_unique<AddedTokenMatcher>(normalized_patterns, std::move(normalized_tokens));

  // HF decides "special" by the decoded string, so a vocab token spelled like a special token
  // is skipped too.
  is_special_.assign(id_end_, false);
  for (uint32_t id = 0; id < id_end_; ++id) {
    const std::string* s = DecodeString(id);
    if (s != nullptr && special_contents.contains(*s)) is_special_[id] = true;
  }

  byte_level_decode_ = decoder_->is_byte_level_only();
  if (byte_level_decode_) {
    token_bytes_end_.resize(id_end_);
    for (uint32_t id = 0; id < id_end_; ++id) {
      if (const std::string* s = DecodeString(id)) AppendByteLevelDecoded(*s, &token_bytes_);
      token_bytes_end_[id] = static_cast<uint32_t>(token_bytes_.size());
    }
  }
  spdlog::debug("tokenizer: loaded, {} ids, {} added tokens", id_end_, added_tokens_.size());
}

const std::string* Tokenizer::DecodeString(uint32_t id) const {
  if (id < added_index_.size() && added_index_[id] >= 0) {
    return &added_tokens_[added_index_[id]].content;
  }
  return model_->IdToToken(id);
}

std::string_view Tokenizer::TokenBytes(uint32_t id) const {
  if (id >= id_end_) return {};
  const uint32_t begin = id == 0 ? 0 : token_bytes_end_[id - 1];
  return std::string_view(token_bytes_).substr(begin, token_bytes_end_[id] - begin);
}

std::optional<uint32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = added_ids_.find(absl::string_view(token.data(), token.size()));
  if (it != added_ids_.end()) return it->second;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(uint32_t id) const {
  const std::string* s = DecodeString(id);
  if (s == nullptr) return std::nullopt;
  return *s;
}

std::vector<uint32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  EncodeAppend(text, &ids);
  return ids;
}

void Tokenizer::EncodeAppend(std::string_view text, std::vector<uint32_t>* ids) const {
  std::string sanitized;
  if (!IsValidUtf8(text)) {
    AppendUtf8Lossy(text, &sanitized);
    text = sanitized;
  }
  if (raw_matcher_->empty()) {
    EncodeSegment(text, ids);
    return;
  }
  // Splits are copied out: EncodeSegment reuses the thread's scratch for its own splits.
  std::vector<AddedSplit> splits;
  raw_matcher_->Split(text, &splits);
  for (const AddedSplit& split : splits) {
    if (split.token_id >= 0) {
      ids->push_back(static_cast<uint32_t>(split.token_id));
    } else {
      EncodeSegment(text.substr(split.begin, split.end - split.begin), ids);
    }
  }
}

void Tokenizer::EncodeSegment(std::string_view segment, std::vector<uint32_t>* ids) const {
  EncodeScratch& scratch = ThreadScratch();
  std::string_view normalized = normalizer_->Normalize(segment, &scratch.normalized);
  if (normalized_matcher_->empty()) {
    EncodePreTokenized(normalized, ids);
    return;
  }
  std::string owned(normalized);  // the scratch buffer is reused below
  scratch.normalized_splits.clear();
  normalized_matcher_->Split(owned, &scratch.normalized_splits);
  const std::vector<AddedSplit> splits = scratch.normalized_splits;
  for (const AddedSplit& split : splits) {
    if (split.token_id >= 0) {
      ids->push_back(static_cast<uint32_t>(split.token_id));
    } else {
      EncodePreTokenized(std::string_view(owned).substr(split.begin, split.end - split.begin), ids);
    }
  }
}

void Tokenizer::EncodePreTokenized(std::string_view text, std::vector<uint32_t>* ids) const {
  if (text.empty()) return;
  if (pre_tokenizer_ == nullptr) {
    model_->Tokenize(text, /*byte_level=*/false, ids);
    return;
  }
  PreTokenizeScratch& s = ThreadScratch().pre_tokenize;
  const bool byte_level = pre_tokenizer_->Run(text, &s);
  for (size_t i = 0; i < s.pieces.size(); ++i) model_->Tokenize(s.piece(i), byte_level, ids);
}

std::string Tokenizer::Decode(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  if (byte_level_decode_) {
    std::string bytes;
    for (uint32_t id : ids) {
      if (skip_special_tokens && IsSpecial(id)) continue;
      const std::string_view b = TokenBytes(id);
      bytes.append(b.data(), b.size());
    }
    if (IsValidUtf8(bytes)) return bytes;
    std::string text;
    AppendUtf8Lossy(bytes, &text);
    return text;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    if (skip_special_tokens && IsSpecial(id)) continue;
    if (const std::string* s = DecodeString(id)) tokens.push_back(*s);
  }
  return decoder_->Decode(std::move(tokens));
}

}  // namespace xserv::tokenizer
