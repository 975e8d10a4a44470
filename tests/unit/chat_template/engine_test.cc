// Engine behaviour, statement by statement: every case in engine_cases.inc was rendered by
// jinja2 in the environment transformers uses (gen_engine_cases.py regenerates it), and must
// come out byte for byte the same here. Error cases below are hand-written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/chat_template/template.h"
#include "common/chat_template/value.h"

namespace xserv::chat_template {
namespace {

struct Case {
  const char* name;
  const char* tmpl;
  const char* expected;
};

constexpr Case kCases[] = {
#include "tests/unit/chat_template/engine_cases.inc"
};

// The variables gen_engine_cases.py renders with.
Value Variables() {
  auto json = nlohmann::ordered_json::parse(R"({
    "d": {"a": 1, "b": [1, 2], "items": "x"},
    "users": [{"name": "al", "active": true}, {"name": "bob", "active": false}],
    "messages": [{"role": "user", "content": "Hello  "}, {"role": "assistant", "content": "Hi"}]
  })");
  return *ValueFromJson(json);
}

// 2025-01-02 13:04:05, the instant jinja2_oracle.py's strftime_now uses.
RenderOptions FixedClock() {
  RenderOptions options;
  options.now = [] {
    std::tm tm{};
    tm.tm_year = 125;
    tm.tm_mon = 0;
    tm.tm_mday = 2;
    tm.tm_hour = 13;
    tm.tm_min = 4;
    tm.tm_sec = 5;
    tm.tm_wday = 4;
    tm.tm_yday = 1;
    return tm;
  };
  return options;
}

absl::StatusOr<std::string> Render(const std::string& tmpl) {
  auto t = Template::Parse(tmpl);
  if (!t.ok()) return t.status();
  return (*t)->Render(Variables(), FixedClock());
}

TEST(EngineTest, MatchesJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto out = Render(c.tmpl);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

struct ErrorCase {
  const char* tmpl;
  const char* message_part;  // must appear in the error message
};

TEST(EngineTest, ErrorsNameTheConstructAndLine) {
  const ErrorCase kErrors[] = {
      {"{{ x.y }}", "line 1, column 5: 'x' is undefined"},
      {"a\nb\n{{ d.a.b.c }}", "line 3"},
      {"{{ raise_exception('boom') }}", "boom"},
      {"{{ 'a' + 1 }}", "can only concatenate str"},
      {"{{ 1 / 0 }}", "division by zero"},
      {"{{ undefined_fn() }}", "'undefined_fn' is undefined"},
      {"\n{{ foo|nosuchfilter }}", "line 2, column 8: no filter named 'nosuchfilter'"},
      {"{% for i in [1] %}{% if i %}{{ i|nosuch }}{% endif %}{% endfor %}x", "no filter named"},
      {"{{ x is nosuchtest }}", "no test named 'nosuchtest'"},
      {"{% if x %}\n{% nosuchtag %}{% endif %}",
       "line 2, column 4: encountered unknown tag 'nosuchtag'"},
      {"{% include 'x.html' %}", "tag 'include' is not supported"},
      {"{% for %}", "expected an assignment target"},
      {"{{ 1 + }}", "unexpected '}}'"},
      {"{% if 1 %}", "expected 'elif' or 'else' or 'endif'"},
      {"{% endif %}", "unknown tag 'endif'"},
      {"{{ 'unterminated }}", "unterminated string literal"},
      {"{{ x ", "missing '}}'"},
      {"{# open comment", "missing end of comment tag"},
      {"{{ [].append(1) }}", "access to attribute 'append' of 'list' object is unsafe"},
      {"{{ d.update({}) }}", "unsafe"},
      {"{{ 'x'.foo() }}", "'str object' has no attribute 'foo'"},
      {"{% for x in 5 %}{% endfor %}", "'int' object is not iterable"},
      {"{% break %}", "'break' outside of a loop"},
      {"{{ range(1000000) }}", "Range too big"},
      {"{{ nothing < 1 }}", "'nothing' is undefined"},
      {"{{ 'a' < 1 }}", "not supported between instances of 'str' and 'int'"},
      {"{% set a, b = [1, 2, 3] %}", "too many values to unpack"},
      {"{{ d|tojson(indent=[]) }}", "indent"},
      {"{{ nothing|tojson }}", "Undefined is not JSON serializable"},
      {"{{ 'abc'.split('') }}", "empty separator"},
      {"{{ (1, 2)|truncate }}", "filter 'truncate' is not supported"},
      {"{% recursive %}", "unknown tag"},
      {"{{ 10000000000 * 10000000000 }}", "integer overflow"},
  };
  for (const ErrorCase& e : kErrors) {
    SCOPED_TRACE(e.tmpl);
    auto out = Render(e.tmpl);
    ASSERT_FALSE(out.ok()) << "rendered: " << *out;
    EXPECT_NE(std::string(out.status().message()).find(e.message_part), std::string::npos)
        << out.status().message();
  }
}

TEST(EngineTest, UnknownFilterInsideIfFailsOnlyWhenEvaluated) {
  // jinja2 defers unknown filters/tests inside `if` and conditional expressions to run time.
  EXPECT_EQ(*Render("{% if false %}{{ x|nosuch }}{% endif %}ok"), "ok");
  EXPECT_EQ(*Render("{{ 1 if true else x|nosuch }}"), "1");
  EXPECT_FALSE(Render("{% if true %}{{ x|nosuch }}{% endif %}").ok());
}

TEST(EngineTest, UndefinedSemantics) {
  EXPECT_EQ(*Render("[{{ nothing }}]"), "[]");
  EXPECT_EQ(*Render("{{ nothing is defined }}{{ not nothing }}{{ nothing|list }}"), "FalseTrue[]");
  EXPECT_EQ(*Render("{{ nothing == nothing2 }}{{ nothing != 1 }}{{ nothing ~ 'x' }}"), "TrueTruex");
  EXPECT_EQ(*Render("{{ d.missing }}|{{ d.missing is undefined }}"), "|True");
  EXPECT_FALSE(Render("{{ nothing.attr }}").ok());
  EXPECT_FALSE(Render("{{ nothing[0] }}").ok());
  EXPECT_FALSE(Render("{{ nothing + 1 }}").ok());
  EXPECT_FALSE(Render("{{ nothing() }}").ok());
}

TEST(EngineTest, ParsedTemplateIsReusableAndIndependentPerRender) {
  auto t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for i in xs %}"
      "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  for (int round = 0; round < 3; ++round) {
    Dict vars;
    vars.Set(Value::String("xs"), Value::List({Value::Int(1), Value::Int(2)}));
    EXPECT_EQ(*(*t)->Render(Value::FromDict(vars)), "3");
  }
}

TEST(EngineTest, OptionsCanDisableTrimAndLstrip) {
  TemplateOptions raw;
  raw.trim_blocks = false;
  raw.lstrip_blocks = false;
  raw.keep_trailing_newline = true;
  auto t = Template::Parse("  {% if true %}\nx\n{% endif %}\n", raw);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*(*t)->Render(Value::FromDict(Dict())), "  \nx\n\n");
}

}  // namespace
}  // namespace xserv::chat_template
