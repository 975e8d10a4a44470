// Value semantics: Python str/repr, float formatting, equality, json.dumps and JSON input.
#include "common/chat_template/value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/chat_template/py_str.h"

namespace xserv::chat_template {
namespace {

TEST(PyStrTest, FloatReprMatchesPython) {
  EXPECT_EQ(py::FloatRepr(1.0), "1.0");
  EXPECT_EQ(py::FloatRepr(0.1), "0.1");
  EXPECT_EQ(py::FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py::FloatRepr(1e16), "1e+16");
  EXPECT_EQ(py::FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(py::FloatRepr(1e-5), "1e-05");
  EXPECT_EQ(py::FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(py::FloatRepr(-2.5), "-2.5");
  EXPECT_EQ(py::FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(py::FloatRepr(1.5e300), "1.5e+300");
  EXPECT_EQ(py::FloatRepr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(py::FloatRepr(std::nan("")), "nan");
  EXPECT_EQ(py::FloatRepr(-INFINITY), "-inf");
}

TEST(PyStrTest, ReprQuotesLikePython) {
  EXPECT_EQ(py::Repr("a"), "'a'");
  EXPECT_EQ(py::Repr("it's"), "\"it's\"");
  EXPECT_EQ(py::Repr("a\"b'c"), "'a\"b\\'c'");
  EXPECT_EQ(py::Repr("a\nb\t\\"), "'a\\nb\\t\\\\'");
  EXPECT_EQ(py::Repr("\x01"), "'\\x01'");
  EXPECT_EQ(py::Repr("é"), "'é'");
  EXPECT_EQ(py::Repr("\xc2\xa0"), "'\\xa0'");  // U+00A0 is not printable
}

TEST(PyStrTest, StripSplitReplace) {
  EXPECT_EQ(py::Strip("  a b \n", std::nullopt, true, true), "a b");
  EXPECT_EQ(py::Strip("\xe3\x80\x80x\xc2\xa0", std::nullopt, true, true), "x");  // U+3000, U+00A0
  EXPECT_EQ(py::Strip("xxaxx", std::string("x"), true, false), "axx");
  EXPECT_EQ(py::Strip("ééaé", std::string("é"), true, true), "a");
  using V = std::vector<std::string>;
  EXPECT_EQ(py::Split(" a  b ", std::nullopt, -1), (V{"a", "b"}));
  EXPECT_EQ(py::Split("a b  c ", std::nullopt, 1), (V{"a", "b  c "}));
  EXPECT_EQ(py::Split("a,,b", std::string(","), -1), (V{"a", "", "b"}));
  EXPECT_EQ(py::RSplit("a,b,c", std::string(","), 1), (V{"a,b", "c"}));
  EXPECT_EQ(py::RSplit(" a b  c ", std::nullopt, 1), (V{" a b", "c"}));
  EXPECT_EQ(py::Replace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(py::Replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(py::Title("hello wORLD-x"), "Hello World-X");
  EXPECT_EQ(py::CodePointCount("héllo"), 5u);
}

TEST(ValueTest, StrAndReprOfContainers) {
  Dict d;
  d.Set(Value::String("k"), Value::Tuple({Value::Int(1), Value::Int(2)}));
  Value list = Value::List({Value::Int(1), Value::String("a"), Value::Float(1.5), Value::None(),
                            Value::Bool(true), Value::FromDict(d), Value::Tuple({Value::Int(1)})});
  EXPECT_EQ(PyStr(list), "[1, 'a', 1.5, None, True, {'k': (1, 2)}, (1,)]");
  EXPECT_EQ(PyStr(Value()), "");
  EXPECT_EQ(PyStr(Value::Bool(false)), "False");
  EXPECT_EQ(PyStr(Value::String("x")), "x");
}

TEST(ValueTest, PythonEquality) {
  EXPECT_TRUE(PyEquals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(PyEquals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(PyEquals(Value::String("1"), Value::Int(1)));
  EXPECT_FALSE(PyEquals(Value::List({Value::Int(1)}), Value::Tuple({Value::Int(1)})));
  EXPECT_TRUE(PyEquals(Value(), Value()));
  EXPECT_FALSE(PyEquals(Value(), Value::None()));
  Dict a;
  a.Set(Value::String("x"), Value::Int(1));
  a.Set(Value::String("y"), Value::Int(2));
  Dict b;
  b.Set(Value::String("y"), Value::Int(2));
  b.Set(Value::String("x"), Value::Int(1));
  EXPECT_TRUE(PyEquals(Value::FromDict(a), Value::FromDict(b)));
}

TEST(ValueTest, DictKeepsInsertionOrderAndReplacesInPlace) {
  Dict d;
  d.Set(Value::String("b"), Value::Int(1));
  d.Set(Value::String("a"), Value::Int(2));
  d.Set(Value::String("b"), Value::Int(3));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.items()[0].first.str(), "b");
  EXPECT_EQ(d.items()[0].second.as_int(), 3);
  EXPECT_EQ(d.Find(Value::Int(1)), nullptr);
}

TEST(ValueTest, JsonDumpsMatchesPython) {
  auto v = ValueFromJson(
      nlohmann::ordered_json::parse(R"({"b": [1, 2.5, "é\n\"", null, true], "a": {}, "c": []})"));
  ASSERT_TRUE(v.ok());
  JsonDumpOptions compact;
  EXPECT_EQ(*JsonDumps(*v, compact),
            "{\"b\": [1, 2.5, \"é\\n\\\"\", null, true], \"a\": {}, \"c\": []}");
  JsonDumpOptions indented;
  indented.has_indent = true;
  indented.indent = "  ";
  indented.item_separator = ",";
  EXPECT_EQ(*JsonDumps(*v, indented),
            "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\\n\\\"\",\n    null,\n    true\n  ],\n"
            "  \"a\": {},\n  \"c\": []\n}");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*JsonDumps(Value::String("é😀\x7f"), ascii), "\"\\u00e9\\ud83d\\ude00\\u007f\"");
  EXPECT_FALSE(JsonDumps(Value(), compact).ok());
  EXPECT_EQ(*JsonDumps(Value::Float(1e16), compact), "1e+16");
}

TEST(ValueTest, FromJsonKeepsOrderedJsonKeyOrder) {
  auto v = ValueFromJson(nlohmann::ordered_json::parse(R"({"z": 1, "a": 2})"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(PyStr(*v), "{'z': 1, 'a': 2}");
  auto big = ValueFromJson(nlohmann::ordered_json::parse("18446744073709551615"));
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->is_float());
}

TEST(ValueTest, FromJsonRefusesExtremeNesting) {
  std::string deep(2000, '[');
  deep += std::string(2000, ']');
  auto j = nlohmann::ordered_json::parse(deep, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_FALSE(ValueFromJson(j).ok());
}

}  // namespace
}  // namespace xserv::chat_template
