// Small inline tokenizer.json documents for the mechanics tests, and paths to the real ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace xserv::tokenizer::testing {

using Json = nlohmann::json;

// A BPE tokenizer.json whose vocab is `tokens` (ids in order) and whose merges are `merges`
// ("a b" strings, or pairs when `pair_merges`).
inline Json BpeJson(const std::vector<std::string>& tokens,
                    const std::vector<std::pair<std::string, std::string>>& merges,
                    bool pair_merges = false) {
  Json vocab = Json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    if (pair_merges) {
      merge_list.push_back(Json::array({a, b}));
    } else {
      merge_list.push_back(a + " " + b);
    }
  }
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

// The 256 byte-level characters (ids 0..255 in byte order) followed by `extra` tokens.
inline std::vector<std::string> ByteLevelVocab(const std::vector<std::string>& extra) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(ByteToUnicodeUtf8(static_cast<uint8_t>(b)));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  return tokens;
}

inline Json AddedTokenJson(uint32_t id, const std::string& content, bool special,
                           bool lstrip = false, bool rstrip = false, bool single_word = false,
                           bool normalized = false) {
  return Json{{"id", id},         {"content", content},         {"single_word", single_word},
              {"lstrip", lstrip}, {"rstrip", rstrip},           {"normalized", normalized},
              {"special", special}};
}

inline std::unique_ptr<Tokenizer> Load(const Json& j) {
  auto tokenizer = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

inline std::string SourceDir() { return XSERV_SOURCE_DIR; }

inline std::string AssetTokenizerDir(const std::string& name) {
  return SourceDir() + "/.assets/tokenizers/" + name;
}

inline bool HaveAssetTokenizer(const std::string& name) {
  return std::filesystem::exists(AssetTokenizerDir(name) + "/tokenizer.json");
}

using Ids = std::vector<uint32_t>;

}  // namespace xserv::tokenizer::testing
