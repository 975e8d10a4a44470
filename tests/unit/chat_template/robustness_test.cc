// Hostile and garbled input: every template must parse-and-render to a value or an error, never
// crash, hang or exhaust memory. Limits (steps, output size, nesting, macro depth) are what
// stop the pathological cases.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "common/chat_template/template.h"

namespace xserv::chat_template {
namespace {

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(XSERV_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Value Conversation() {
  auto json = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "<think>r</think>ok", "thinking": "t",
                  "tool_calls": [{"type": "function", "function": {"name": "f",
                                  "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "res"}, {"role": "user", "content": [1, 2]}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  return *ValueFromJson(json);
}

RenderOptions SmallLimits() {
  RenderOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 1 << 20;
  options.now = [] { return std::tm{}; };
  return options;
}

// Parses and renders; the only requirement is that it returns.
void Exercise(const std::string& source, const Value& vars) {
  auto t = Template::Parse(source);
  if (!t.ok()) {
    EXPECT_FALSE(t.status().message().empty());
    return;
  }
  auto out = (*t)->Render(vars, SmallLimits());
  if (!out.ok()) {
    EXPECT_FALSE(out.status().message().empty());
  }
}

TEST(RobustnessTest, MutatedRealTemplates) {
  const std::string sources[] = {ReadTemplate("qwen3.jinja"), ReadTemplate("gpt-oss.jinja"),
                                 ReadTemplate("llama3.jinja"), ReadTemplate("qwen3-old.jinja")};
  const std::string pieces[] = {"{%",
                                "%}",
                                "{{",
                                "}}",
                                "{#",
                                "#}",
                                "-",
                                "(",
                                ")",
                                "[",
                                "]",
                                "{",
                                "}",
                                "'",
                                "\"",
                                "\\",
                                "|",
                                ".",
                                ",",
                                "endfor",
                                "endif",
                                " if ",
                                " for ",
                                " in ",
                                "loop",
                                "ns",
                                "macro",
                                "caller()",
                                "\n",
                                "0",
                                "9999999999999999999999",
                                "\xff",
                                "\xe2\x82"};
  const Value vars = Conversation();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s = sources[static_cast<size_t>(iter) % 4];
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:  // delete a span
          s.erase(pos, 1 + rng() % 20);
          break;
        case 1:  // insert a syntax piece
          s.insert(pos, pieces[rng() % std::size(pieces)]);
          break;
        case 2:  // duplicate a span
          s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 200));
          break;
        default:  // flip a byte
          s[pos] = static_cast<char>(rng() % 256);
      }
    }
    SCOPED_TRACE(iter);
    Exercise(s, vars);
  }
}

TEST(RobustnessTest, RandomTokenSoup) {
  const std::string tokens[] = {
      "{{",   "}}",   "{%",       "%}",    "{%-",      "-%}",         "if",       "for",     "x",
      "in",   "set",  "=",        "endif", "endfor",   "macro",       "endmacro", "(",       ")",
      "[",    "]",    ",",        ":",     "|",        "length",      "is",       "defined", "not",
      "and",  "~",    "+",        "*",     "**",       "//",          "'s'",      "1",       "2.5",
      "none", "loop", "messages", ".",     "range(9)", "namespace()", " ",        "\n"};
  const Value vars = Conversation();
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) s += tokens[rng() % std::size(tokens)];
    SCOPED_TRACE(s);
    Exercise(s, vars);
  }
}

absl::Status RenderStatus(const std::string& source) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return (*t)->Render(Conversation(), SmallLimits()).status();
}

TEST(RobustnessTest, LimitsStopPathologicalTemplates) {
  // Deep syntactic nesting is refused by the parser.
  EXPECT_FALSE(
      RenderStatus("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
  EXPECT_FALSE(RenderStatus("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}").ok());
  std::string nested_ifs;
  for (int i = 0; i < 2000; ++i) nested_ifs += "{% if true %}";
  for (int i = 0; i < 2000; ++i) nested_ifs += "{% endif %}";
  EXPECT_FALSE(RenderStatus(nested_ifs).ok());
  EXPECT_FALSE(RenderStatus("{{ " + std::string(5000, '-') + "1 }}").ok());
  std::string nots;
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_FALSE(RenderStatus("{{ " + nots + "1 }}").ok());
  // Unbounded work is stopped by the step limit.
  EXPECT_EQ(RenderStatus("{% for i in range(100000) %}{% for j in range(100000) %}"
                         "{% endfor %}{% endfor %}")
                .code(),
            absl::StatusCode::kResourceExhausted);
  // Output and string growth are capped.
  EXPECT_EQ(RenderStatus("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}"
                         "{% endfor %}")
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RenderStatus("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                         "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RenderStatus("{{ 'x' * 100000000000 }}").code(), absl::StatusCode::kResourceExhausted);
  // Unbounded recursion is stopped by the macro depth limit.
  EXPECT_EQ(RenderStatus("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").code(),
            absl::StatusCode::kResourceExhausted);
  // Values nested ever deeper (which would recurse when printed or freed) are refused.
  EXPECT_FALSE(RenderStatus("{% set ns = namespace(v=[]) %}{% for i in range(5000) %}"
                            "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}")
                   .ok());
  // A namespace cannot be stored inside itself (no reference cycles).
  EXPECT_FALSE(RenderStatus("{% set ns = namespace() %}{% set ns.me = [ns] %}").ok());
}

TEST(RobustnessTest, InvalidUtf8AndOddBytesDoNotCrash) {
  const Value vars = Conversation();
  Exercise("{{ '\xff\xfe' }}{{ '\xe2\x82'|upper }}{{ '\xc3'|length }}{{ '\xf0\x9f'[::-1] }}", vars);
  Exercise(std::string("a\0b{{ 1 }}", 10), vars);
  Exercise("{{ '\\ud800' }}{{ '\\U0010ffff' }}{{ '\\U00110000' }}", vars);
}

}  // namespace
}  // namespace xserv::chat_template
