// jinja2's built-in filters (the subset chat templates use), plus transformers' tojson override:
//   json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=False)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/py_str.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",         "attr",      "batch",    "capitalize", "center",     "count",      "d",
    "default",     "dictsort",  "e",        "escape",     "first",      "float",      "format",
    "indent",      "int",       "items",    "join",       "last",       "length",     "list",
    "lower",       "map",       "max",      "min",        "reject",     "rejectattr", "replace",
    "reverse",     "round",     "safe",     "select",     "selectattr", "sort",       "string",
    "sum",         "title",     "tojson",   "trim",       "unique",     "upper",      "wordcount",
    "forceescape", "striptags", "truncate", "slice",      "groupby",    "pprint",     "wordwrap"};

absl::Status Error(const std::string& message) { return absl::InvalidArgumentError(message); }

// jinja2's make_attrgetter: dotted path, integer parts index sequences.
absl::StatusOr<Value> GetPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key = Value::String(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      key = Value::Int(std::atoll(part.c_str()));
    }
    ASSIGN_OR_RETURN(cur, GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

absl::StatusOr<Value> AttrOf(const Value& item, const Value& attribute) {
  if (attribute.is_undefined() || attribute.is_none()) return item;
  if (attribute.is_int()) return GetItem(item, attribute);
  return GetPath(item, PyStr(attribute));
}

// Sort key used by sort/unique/dictsort/min/max: lower-cased strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(py::Lower(v.str()));
  return v;
}

// Stable sort of (key, item) pairs by key. Sorts indices rather than the pairs so no Value is
// moved inside std::stable_sort.
absl::Status SortValues(std::vector<std::pair<Value, Value>>* keyed, bool reverse) {
  std::vector<size_t> order(keyed->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    auto c = PyCompare((*keyed)[a].first, (*keyed)[b].first);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  std::vector<std::pair<Value, Value>> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back((*keyed)[i]);
  *keyed = std::move(sorted);
  return error;
}

absl::StatusOr<Value> ToJson(const Value& input, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto a,
                   BindArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  o.ensure_ascii = a[0].Truthy();
  if (!a[1].is_undefined() && !a[1].is_none()) {
    o.has_indent = true;
    if (a[1].is_string()) {
      o.indent = a[1].str();
    } else if (a[1].is_int()) {
      o.indent.assign(static_cast<size_t>(std::clamp<int64_t>(a[1].as_int(), 0, 64)), ' ');
    } else {
      return Error("tojson indent must be an int or a string");
    }
    o.item_separator = std::string(1, ',');  // Python: indent implies "," separators
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    const auto& seps = a[2].items();
    if (!a[2].is_list() || seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      return Error("tojson separators must be a pair of strings");
    }
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  o.sort_keys = a[3].Truthy();
  ASSIGN_OR_RETURN(std::string s, JsonDumps(input, o));
  return Value::String(std::move(s));
}

// Python int(str, base) including surrounding whitespace, sign and underscores.
std::optional<int64_t> ParseInt(const std::string& text, int base) {
  std::string s = py::Strip(text, std::nullopt, true, true);
  std::string digits;
  for (char c : s) {
    if (c != '_') digits.push_back(c);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end == digits.c_str() || *end != '\0') return std::nullopt;
  return v;
}

std::optional<double> ParseFloat(const std::string& text) {
  std::string s = py::Strip(text, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

absl::StatusOr<Value> Round(const Value& input, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, BindArgs("round", args, {"precision", "method"}));
  int64_t precision = a[0].is_undefined() ? 0 : a[0].as_int();
  std::string method = a[1].is_string() ? a[1].str() : "common";
  if (!input.is_number()) return Error("round filter requires a number");
  if (method != "common" && method != "ceil" && method != "floor") {
    return Error("method must be common, ceil or floor");
  }
  // Python round(int, n) stays an int.
  if (method == "common" && !input.is_float() && precision >= 0) return Value::Int(input.as_int());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = input.as_double() * scale;
  double r;
  if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    r = std::nearbyint(x);  // round-half-even, like Python's round()
  }
  return Value::Float(r / scale);
}

absl::StatusOr<Value> Indent(const Value& input, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, BindArgs("indent", args, {"width", "first", "blank"}));
  std::string indention =
      a[0].is_string() ? a[0].str()
      : a[0].is_undefined()
          ? std::string(4, ' ')
          : std::string(static_cast<size_t>(std::clamp<int64_t>(a[0].as_int(), 0, 1024)), ' ');
  if (input.is_undefined()) return absl::InvalidArgumentError(input.undefined_message());
  if (!input.is_string()) {
    return Error(
        absl::StrCat("unsupported operand type(s) for +=: '", input.TypeName(), "' and 'str'"));
  }
  std::string s = input.str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string rv;
  if (a[2].Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (a[1].Truthy()) rv = indention + rv;
  return Value::String(std::move(rv));
}

// select/reject/selectattr/rejectattr share jinja2's select_or_reject.
absl::StatusOr<Value> SelectOrReject(Renderer& r, const Value& input, const CallArgs& args,
                                     bool by_attr, bool keep_when) {
  // jinja2 starts with `if seq:`, so falsy inputs (None, 0, '') give an empty result.
  if (!input.Truthy()) return Value::List({});
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) return Error("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = PyStr(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                              args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(r.Step());
    Value subject = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(subject, AttrOf(item, attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs copy = test_args;
      ASSIGN_OR_RETURN(pass, ApplyTest(r, test, subject, copy));
    }
    if (pass == keep_when) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(Renderer& r, const Value& input, const CallArgs& args) {
  if (!input.Truthy()) return Value::List({});  // jinja2's `if value:` guard
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = &v;
    if (k == "default") dflt = &v;
  }
  if (attribute != nullptr) {
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, AttrOf(item, *attribute));
      if (v.is_undefined() && dflt != nullptr) v = *dflt;
      out.push_back(std::move(v));
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty()) return Error("map requires a filter name or attribute=");
  std::string filter = PyStr(args.positional[0]);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    RETURN_IF_ERROR(r.Step());
    CallArgs copy = rest;
    ASSIGN_OR_RETURN(Value v, ApplyFilter(r, filter, item, copy));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> SortFilter(const Value& input, const CallArgs& args, bool unique) {
  // a = {reverse, case_sensitive, attribute}; unique has no `reverse`.
  std::vector<Value> a;
  if (unique) {
    ASSIGN_OR_RETURN(std::vector<Value> u,
                     BindArgs("unique", args, {"case_sensitive", "attribute"}));
    a = {Value::Bool(false), u[0], u[1]};
  } else {
    ASSIGN_OR_RETURN(a, BindArgs("sort", args, {"reverse", "case_sensitive", "attribute"}));
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, AttrOf(item, a[2]));
    keyed.emplace_back(SortKey(key, a[1].Truthy()), item);
  }
  std::vector<Value> out;
  if (unique) {
    std::vector<Value> seen;
    for (auto& [key, item] : keyed) {
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return PyEquals(s, key); })) {
        continue;
      }
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  RETURN_IF_ERROR(SortValues(&keyed, a[0].Truthy()));
  for (auto& [key, item] : keyed) out.push_back(item);
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& input, const CallArgs& args, bool want_max) {
  ASSIGN_OR_RETURN(auto a,
                   BindArgs(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  ASSIGN_OR_RETURN(Value best_key, AttrOf(best, a[1]));
  best_key = SortKey(best_key, a[0].Truthy());
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value key, AttrOf(items[i], a[1]));
    key = SortKey(key, a[0].Truthy());
    ASSIGN_OR_RETURN(int c, PyCompare(key, best_key));
    if (want_max ? c > 0 : c < 0) {
      best = items[i];
      best_key = key;
    }
  }
  return best;
}

absl::StatusOr<Value> Length(const Value& input) {
  switch (input.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(py::CodePointCount(input.str())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(input.items().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(input.dict().size()));
    default:
      return Error(absl::StrCat("object of type '", input.TypeName(), "' has no len()"));
  }
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

absl::StatusOr<Value> ApplyFilter(Renderer& r, std::string_view name, const Value& input,
                                  CallArgs& args) {
  RETURN_IF_ERROR(r.Step());
  if (name == "tojson") return ToJson(input, args);
  if (name == "safe" || name == "string" || name == "e" || name == "escape" ||
      name == "forceescape") {
    RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    if (name == "safe") return input;
    if (name == "string") return ToStringValue(input);
    return Value::String(HtmlEscape(PyStr(input)));
  }
  if (name == "trim") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"chars"}));
    std::optional<std::string> chars;
    if (a[0].is_string()) chars = a[0].str();
    return Value::String(py::Strip(PyStr(input), chars, true, true));
  }
  if (name == "length" || name == "count") return Length(input);
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    if (items.empty())
      return Value::Undefined(absl::StrCat("No ", std::string(name), " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"d", "attribute"}));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    std::string sep = a[0].is_undefined() ? "" : PyStr(a[0]);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, AttrOf(items[i], a[1]));
      if (i > 0) out += sep;
      out += v.is_string() ? v.str() : PyStr(v);
      RETURN_IF_ERROR(r.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "upper") return Value::String(py::Upper(PyStr(input)));
  if (name == "lower") return Value::String(py::Lower(PyStr(input)));
  if (name == "capitalize") return Value::String(py::Capitalize(PyStr(input)));
  if (name == "title") {
    // jinja2: words start after whitespace or one of -([{< ; each word is capitalized.
    std::string s = PyStr(input);
    std::string out;
    bool at_word_start = true;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t start = pos;
      uint32_t cp = py::DecodeUtf8(s, &pos);
      std::string one = s.substr(start, pos - start);
      bool boundary =
          py::IsSpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
      out += boundary ? one : (at_word_start ? py::Upper(one) : py::Lower(one));
      at_word_start = boundary;
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"old", "new", "count"}));
    int64_t count = (a[2].is_undefined() || a[2].is_none()) ? -1 : a[2].as_int();
    std::string out = py::Replace(PyStr(input), PyStr(a[0]), PyStr(a[1]), count);
    RETURN_IF_ERROR(r.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "default" || name == "d") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"default_value", "boolean"}));
    Value dflt = a[0].is_undefined() ? Value::String("") : a[0];
    if (input.is_undefined() || (a[1].Truthy() && !input.Truthy())) return dflt;
    return input;
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    return Value::List(std::move(items));
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::List({});
    if (!input.is_dict()) return Error("Can only get item pairs from a mapping.");
    CallArgs none;
    return CallMethod(r, input, "items", none);
  }
  if (name == "dictsort") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"case_sensitive", "by", "reverse"}));
    if (!input.is_dict()) return Error("dictsort requires a mapping");
    bool by_value = a[1].is_string() && a[1].str() == "value";
    std::vector<std::pair<Value, Value>> keyed;
    for (const auto& [k, v] : input.dict().items()) {
      keyed.emplace_back(SortKey(by_value ? v : k, a[0].Truthy()), Value::Tuple({k, v}));
    }
    RETURN_IF_ERROR(SortValues(&keyed, a[2].Truthy()));
    std::vector<Value> out;
    for (auto& [k, item] : keyed) out.push_back(item);
    return Value::List(std::move(out));
  }
  if (name == "map") return Map(r, input, args);
  if (name == "select") return SelectOrReject(r, input, args, false, true);
  if (name == "reject") return SelectOrReject(r, input, args, false, false);
  if (name == "selectattr") return SelectOrReject(r, input, args, true, true);
  if (name == "rejectattr") return SelectOrReject(r, input, args, true, false);
  if (name == "unique") return SortFilter(input, args, true);
  if (name == "sort") return SortFilter(input, args, false);
  if (name == "min" || name == "max") return MinMax(input, args, name == "max");
  if (name == "reverse") {
    if (input.is_string()) {
      ASSIGN_OR_RETURN(std::vector<Value> chars, Iterate(input));
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->str();
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if ((name == "int" || name == "float") && input.is_undefined()) {
    return absl::InvalidArgumentError(input.undefined_message());
  }
  if (name == "int") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"default", "base"}));
    Value dflt = a[0].is_undefined() ? Value::Int(0) : a[0];
    if (input.is_int() || input.is_bool()) return Value::Int(input.as_int());
    if (input.is_float()) {
      double d = input.as_double();
      if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return dflt;
      return Value::Int(static_cast<int64_t>(d));
    }
    if (input.is_string()) {
      int base = a[1].is_int() ? static_cast<int>(a[1].as_int()) : 10;
      if (auto v = ParseInt(input.str(), base)) return Value::Int(*v);
      if (auto f = ParseFloat(input.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(*f));
      }
    }
    return dflt;
  }
  if (name == "float") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"default"}));
    Value dflt = a[0].is_undefined() ? Value::Float(0.0) : a[0];
    if (input.is_number()) return Value::Float(input.as_double());
    if (input.is_string()) {
      if (auto f = ParseFloat(input.str())) return Value::Float(*f);
    }
    return dflt;
  }
  if (name == "abs") {
    if (input.is_float()) return Value::Float(std::fabs(input.as_double()));
    if (input.is_number()) {
      if (input.as_int() == INT64_MIN) return Error("integer overflow");
      return Value::Int(std::llabs(input.as_int()));
    }
    return Error(absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  if (name == "round") return Round(input, args);
  if (name == "indent") return Indent(input, args);
  if (name == "center") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"width"}));
    CallArgs just;
    just.positional.push_back(a[0].is_undefined() ? Value::Int(80) : a[0]);
    return CallMethod(r, ToStringValue(input), "center", just);
  }
  if (name == "wordcount") {
    std::string s = PyStr(input);
    int64_t words = 0;
    bool in_word = false;
    size_t pos = 0;
    while (pos < s.size()) {
      uint32_t cp = py::DecodeUtf8(s, &pos);
      bool word_char = py::IsAlpha(cp) || (cp >= '0' && cp <= '9') || cp == '_';
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::Int(words);
  }
  if (name == "batch") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"linecount", "fill_with"}));
    if (!a[0].is_int() || a[0].as_int() <= 0) return Error("batch linecount must be positive");
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    size_t n = static_cast<size_t>(a[0].as_int());
    std::vector<Value> out;
    for (size_t i = 0; i < items.size(); i += n) {
      std::vector<Value> chunk(
          items.begin() + static_cast<ptrdiff_t>(i),
          items.begin() + static_cast<ptrdiff_t>(std::min(i + n, items.size())));
      if (chunk.size() < n && !a[1].is_undefined()) chunk.resize(n, a[1]);
      out.push_back(Value::List(std::move(chunk)));
    }
    return Value::List(std::move(out));
  }
  if (name == "sum") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"attribute", "start"}));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
    Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, AttrOf(item, a[0]));
      ASSIGN_OR_RETURN(total, BinaryOp(r, "+", total, v));
    }
    return total;
  }
  if (name == "attr") {
    // jinja2's attr() reads Python attributes only, never dict items.
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"name"}));
    if (input.is_dict()) {
      if (HasMethod(input, PyStr(a[0]))) return GetAttr(input, PyStr(a[0]));
      return Value::Undefined(absl::StrCat("'dict object' has no attribute '", PyStr(a[0]), "'"));
    }
    return GetAttr(input, PyStr(a[0]));
  }
  if (name == "format") {
    if (!args.keyword.empty()) {
      Dict d;
      for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
      return BinaryOp(r, "%", ToStringValue(input), Value::FromDict(std::move(d)));
    }
    return BinaryOp(r, "%", ToStringValue(input), Value::Tuple(args.positional));
  }
  if (IsKnownFilter(name)) {
    return absl::UnimplementedError(
        absl::StrCat("filter '", std::string(name), "' is not supported by this engine"));
  }
  return Error(absl::StrCat("no filter named '", std::string(name), "'"));
}

}  // namespace xserv::chat_template
