#include "common/tokenizer/incremental_decoder.h"

#include "common/tokenizer/utf8.h"

namespace xserv::tokenizer {
namespace {

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacementUtf8.size() &&
         std::string_view(s).substr(s.size() - kReplacementUtf8.size()) == kReplacementUtf8;
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDecoder::Step(uint32_t id) {
  std::string out;
  if (tokenizer_.byte_level_decode()) {
    StepBytes(id, &out);
  } else {
    StepWindow(id, &out);
  }
  return out;
}

std::string IncrementalDecoder::Step(std::span<const uint32_t> ids) {
  std::string out;
  for (uint32_t id : ids) {
    if (tokenizer_.byte_level_decode()) {
      StepBytes(id, &out);
    } else {
      StepWindow(id, &out);
    }
  }
  return out;
}

void IncrementalDecoder::StepBytes(uint32_t id, std::string* out) {
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return;
  const std::string_view bytes = tokenizer_.TokenBytes(id);
  if (bytes.empty()) return;
  pending_bytes_.append(bytes.data(), bytes.size());
  const size_t keep = IncompleteUtf8SuffixLength(pending_bytes_);
  const size_t ready = pending_bytes_.size() - keep;
  if (ready == 0) return;
  AppendUtf8Lossy(std::string_view(pending_bytes_).substr(0, ready), out);
  pending_bytes_.erase(0, ready);
}

void IncrementalDecoder::StepWindow(uint32_t id, std::string* out) {
  window_.push_back(id);
  const std::string text = tokenizer_.Decode(window_, skip_special_tokens_);
  const bool grew = text.size() > prefix_text_.size();
  const bool complete = !EndsWithReplacement(text);
  // An unfinished character resolves within 4 tokens; past the cap, a U+FFFD is real (and a run
  // of skipped special tokens must not grow the window either).
  const bool capped = window_.size() >= kMaxWindowTokens;
  if (!capped && (!grew || !complete)) return;
  if (grew) {
    // vLLM emits text[len(prefix_text):]; never start inside a character if the decoder
    // rewrote the prefix (possible only with non-local decoders such as ByteFallback).
    size_t from = prefix_text_.size();
    while (from < text.size() && (static_cast<uint8_t>(text[from]) & 0xC0) == 0x80) ++from;
    out->append(text, from, std::string::npos);
  }
  // The ids just read become the next prefix window (vLLM: prefix_offset = read_offset).
  window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(read_));
  read_ = window_.size();
  prefix_text_ = tokenizer_.Decode(window_, skip_special_tokens_);
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  if (tokenizer_.byte_level_decode()) {
    AppendUtf8Lossy(pending_bytes_, &out);
    pending_bytes_.clear();
    return out;
  }
  const std::string text = tokenizer_.Decode(window_, skip_special_tokens_);
  if (text.size() > prefix_text_.size()) out.append(text, prefix_text_.size(), std::string::npos);
  window_.clear();
  read_ = 0;
  prefix_text_.clear();
  return out;
}

}  // namespace xserv::tokenizer
