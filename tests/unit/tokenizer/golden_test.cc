// Golden tests against HF `tokenizers`: tests/data/tokenizer/<name>.jsonl, generated on a
// machine with the Python package. Each line is either an encode case
//   {"text": str, "ids": [int], "decoded": str, "decoded_skip": str}
// or a decode case
//   {"decode_ids": [int], "decoded": str, "decoded_skip": str}
// where decoded / decoded_skip are tokenizer.decode(ids, skip_special_tokens=False / True).
// A tokenizer is skipped (with the reason) when its fixture or its .assets file is missing.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/incremental_decoder.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace xserv::tokenizer {
namespace {

using testing::AssetTokenizerDir;
using testing::HaveAssetTokenizer;
using testing::Ids;
using testing::Json;
using testing::SourceDir;

class GoldenTest : public ::testing::TestWithParam<std::string> {};

std::string Streamed(const Tokenizer& tok, const Ids& ids, bool skip) {
  IncrementalDecoder decoder(tok, skip);
  std::string out;
  for (uint32_t id : ids) out += decoder.Step(id);
  return out + decoder.Flush();
}

TEST_P(GoldenTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  const std::string fixture = SourceDir() + "/tests/data/tokenizer/" + name + ".jsonl";
  std::ifstream in(fixture);
  if (!in) GTEST_SKIP() << "no golden fixture " << fixture;
  if (!HaveAssetTokenizer(name)) {
    GTEST_SKIP() << "no " << AssetTokenizerDir(name) << "/tokenizer.json; run scripts/fetch-assets.sh";
  }
  std::vector<std::pair<int, Json>> cases;  // (line number, case)
  std::string line;
  int line_no = 0, nonempty_texts = 0, empty_encodings = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    Json c = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(c.is_discarded()) << fixture << ":" << line_no << " is not JSON";
    if (c.contains("text") && !c["text"].get<std::string>().empty()) {
      ++nonempty_texts;
      empty_encodings += c["ids"].empty();
    }
    cases.emplace_back(line_no, std::move(c));
  }
  ASSERT_FALSE(cases.empty()) << fixture << " is empty";
  // A BPE tokenizer never turns most non-empty texts into no ids: such a fixture was made from
  // a tokenizer that failed to load its vocabulary, and comparing against it proves nothing.
  if (empty_encodings * 2 > nonempty_texts) {
    GTEST_SKIP() << fixture << " looks degenerate: " << empty_encodings << " of "
                 << nonempty_texts << " non-empty texts have no ids; regenerate it";
  }

  auto loaded = Tokenizer::FromFile(AssetTokenizerDir(name));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tok = **loaded;
  int failures = 0;
  for (const auto& [no, c] : cases) {
    Ids ids;
    if (c.contains("text")) {
      const std::string text = c["text"].get<std::string>();
      ids = c["ids"].get<Ids>();
      const Ids got = tok.Encode(text);
      EXPECT_EQ(got, ids) << fixture << ":" << no << " text=" << c["text"].dump();
      failures += got != ids;
    } else {
      ids = c["decode_ids"].get<Ids>();
    }
    const std::string decoded = c["decoded"].get<std::string>();
    const std::string decoded_skip = c["decoded_skip"].get<std::string>();
    EXPECT_EQ(tok.Decode(ids, false), decoded) << fixture << ":" << no;
    EXPECT_EQ(tok.Decode(ids, true), decoded_skip) << fixture << ":" << no;
    EXPECT_EQ(Streamed(tok, ids, false), decoded) << fixture << ":" << no << " (streamed)";
    EXPECT_EQ(Streamed(tok, ids, true), decoded_skip) << fixture << ":" << no << " (streamed)";
    if (failures > 20) FAIL() << "too many encode mismatches; stopping";
  }
  RecordProperty("cases", static_cast<int>(cases.size()));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest,
                         ::testing::Values("qwen3", "gpt2", "gpt-oss", "llama3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace xserv::tokenizer
