// Golden fixtures from transformers' apply_chat_template: every line of every
// tests/data/chat_template/*.jsonl must render byte for byte (or fail where transformers
// raised). Line format:
//   {"template": "qwen3.jinja", "messages": [...], "tools": [...] | null,
//    "add_generation_prompt": bool, "kwargs": {...}, "special_tokens": {...},
//    "date": "YYYY-MM-DD", "prompt": "..."}   (or "error": "..." instead of "prompt")
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/chat_template/chat_template.h"

namespace xserv::chat_template {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSourceDir(XSERV_SOURCE_DIR);

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Shows where two prompts first differ, with some context around the offset.
std::string DescribeMismatch(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  size_t from = i > 80 ? i - 80 : 0;
  auto context = [&](const std::string& s) {
    return Json(s.substr(std::min(from, s.size()), 160)).dump();
  };
  return absl::StrCat("first difference at byte ", i, " (expected ", expected.size(),
                      " bytes, got ", actual.size(), ")\n  expected: ", context(expected),
                      "\n  actual:   ", context(actual));
}

RenderOptions ClockAt(const std::string& date) {
  std::tm tm{};
  if (date.size() == 10) {
    tm.tm_year = std::stoi(date.substr(0, 4)) - 1900;
    tm.tm_mon = std::stoi(date.substr(5, 2)) - 1;
    tm.tm_mday = std::stoi(date.substr(8, 2));
    tm.tm_hour = 12;
    std::tm copy = tm;
    timegm(&copy);  // fills weekday/yearday for formats that use them
    tm = copy;
  }
  RenderOptions options;
  options.now = [tm] { return tm; };
  return options;
}

TEST(GoldenTest, MatchesTransformers) {
  const fs::path dir = kSourceDir / "tests/data/chat_template";
  std::vector<fs::path> files;
  if (fs::is_directory(dir)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    GTEST_SKIP() << "no golden fixtures in " << dir
                 << " yet (generated with transformers' apply_chat_template)";
  }
  std::map<std::string, std::string> sources;
  int checked = 0;
  for (const fs::path& file : files) {
    std::istringstream lines(ReadFile(file));
    std::string line;
    int line_no = 0;
    while (std::getline(lines, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Json fx = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(fx.is_discarded()) << file << ":" << line_no << ": invalid JSON line";
      SCOPED_TRACE(absl::StrCat(file.filename().string(), ":", line_no, " case ",
                                fx.value("case", std::string("?"))));
      ASSERT_TRUE(fx.contains("template") && fx["template"].is_string());
      const std::string name = fx["template"].get<std::string>();
      if (!sources.count(name)) {
        sources[name] = ReadFile(kSourceDir / "tests/data/chat_templates" / name);
        ASSERT_FALSE(sources[name].empty()) << "missing template " << name;
      }
      Json special = fx.value("special_tokens", Json::object());
      auto ct = ChatTemplate::FromString(sources[name], special);
      ASSERT_TRUE(ct.ok()) << ct.status();
      ChatRenderRequest req;
      req.messages = fx.value("messages", Json::array());
      if (fx.contains("tools") && !fx["tools"].is_null()) req.tools = fx["tools"];
      req.add_generation_prompt = fx.value("add_generation_prompt", false);
      req.kwargs = fx.value("kwargs", Json::object());
      if (req.kwargs.is_null()) req.kwargs = Json::object();
      auto out = ct->Render(req, ClockAt(fx.value("date", std::string())));
      ++checked;
      if (fx.contains("error")) {
        EXPECT_FALSE(out.ok()) << "transformers raised " << fx["error"].dump()
                               << " but we rendered " << Json(*out).dump();
        continue;
      }
      ASSERT_TRUE(out.ok()) << out.status();
      const std::string expected = fx["prompt"].get<std::string>();
      EXPECT_TRUE(*out == expected) << DescribeMismatch(expected, *out);
    }
  }
  EXPECT_GT(checked, 0);
  RecordProperty("cases_checked", checked);
}

}  // namespace
}  // namespace xserv::chat_template
