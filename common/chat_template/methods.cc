// Python methods templates call on str, dict and list values. Mutating list/dict methods are
// refused exactly like jinja2's ImmutableSandboxedEnvironment (which HF renders with) does.
#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/py_str.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

constexpr std::array<std::string_view, 30> kStrMethods = {
    "startswith", "endswith", "strip",      "lstrip",  "rstrip",  "split",   "rsplit", "upper",
    "lower",      "title",    "capitalize", "replace", "find",    "rfind",   "count",  "join",
    "isdigit",    "isalpha",  "isalnum",    "isspace", "isupper", "islower", "format", "splitlines",
    "index",      "rindex",   "ljust",      "rjust",   "center",  "swapcase"};
constexpr std::array<std::string_view, 5> kDictSafe = {"get", "items", "keys", "values", "copy"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault",
                                                         "update"};
constexpr std::array<std::string_view, 3> kListSafe = {"index", "count", "copy"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "extend",  "insert", "pop",
                                                         "remove", "reverse", "sort",   "clear"};

template <size_t N>
bool In(const std::array<std::string_view, N>& set, std::string_view name) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

absl::Status Unsafe(const Value& self, std::string_view name) {
  return absl::PermissionDeniedError(absl::StrCat("access to attribute '", std::string(name),
                                                  "' of '", self.TypeName(),
                                                  "' object is unsafe."));
}

absl::StatusOr<std::optional<std::string>> OptionalString(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " arg must be None or str"));
  }
  return std::optional<std::string>(v.str());
}

absl::StatusOr<int64_t> OptionalInt(const Value& v, int64_t dflt) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int() && !v.is_bool()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
  }
  return v.as_int();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

template <typename Pred>
Value AllCodePoints(const std::string& s, Pred pred) {
  if (s.empty()) return Value::Bool(false);
  size_t pos = 0;
  while (pos < s.size()) {
    if (!pred(py::DecodeUtf8(s, &pos))) return Value::Bool(false);
  }
  return Value::Bool(true);
}

// str.format with automatic/explicit indices and names; format specs are not supported.
absl::StatusOr<Value> StrFormat(Renderer& r, const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("Single '{' encountered in format string");
    }
    std::string field = fmt.substr(i + 1, close - i - 1);
    bool repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find(':') != std::string::npos) {
      return absl::InvalidArgumentError("format specs in str.format are not supported");
    }
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.positional.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Replacement index ", idx, " out of range for positional args tuple"));
      }
      v = &args.positional[idx];
    } else {
      for (const auto& [k, val] : args.keyword) {
        if (k == field) v = &val;
      }
      if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat("KeyError: '", field, "'"));
    }
    out += repr ? PyRepr(*v) : PyStr(*v);
    RETURN_IF_ERROR(r.CheckSize(out.size()));
    i = close;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Justify(const std::string& s, const std::vector<Value>& a,
                              std::string_view how) {
  ASSIGN_OR_RETURN(int64_t width, OptionalInt(a[0], 0));
  std::string fill = a[1].is_string() ? a[1].str() : " ";
  int64_t len = static_cast<int64_t>(py::CodePointCount(s));
  if (width <= len || width > (1 << 20)) return Value::String(s);
  int64_t pad = width - len;
  int64_t left = how == "ljust" ? 0 : (how == "rjust" ? pad : pad / 2 + (pad & width & 1));
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < pad - left; ++i) out += fill;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CallStrMethod(Renderer& r, const Value& self, std::string_view name,
                                    const CallArgs& args) {
  const std::string& s = self.str();
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"prefix", "start", "end"}));
    ASSIGN_OR_RETURN(Value sub, GetSlice(self, a[1], a[2], Value()));
    std::vector<Value> candidates = a[0].is_tuple() ? a[0].items() : std::vector<Value>{a[0]};
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(name), " first arg must be str or a tuple of str, not ", c.TypeName()));
      }
      const std::string& t = sub.str();
      const std::string& p = c.str();
      bool hit = name == "startswith"
                     ? t.compare(0, p.size(), p) == 0
                     : (t.size() >= p.size() && t.compare(t.size() - p.size(), p.size(), p) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"chars"}));
    ASSIGN_OR_RETURN(auto chars, OptionalString(a[0], name));
    return Value::String(py::Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"sep", "maxsplit"}));
    ASSIGN_OR_RETURN(auto sep, OptionalString(a[0], "sep"));
    ASSIGN_OR_RETURN(int64_t maxsplit, OptionalInt(a[1], -1));
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    return StringList(name == "split" ? py::Split(s, sep, maxsplit) : py::RSplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    return StringList(std::move(lines));
  }
  if (name == "upper") return Value::String(py::Upper(s));
  if (name == "lower") return Value::String(py::Lower(s));
  if (name == "title") return Value::String(py::Title(s));
  if (name == "capitalize") return Value::String(py::Capitalize(s));
  if (name == "swapcase") {
    std::string out;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t start = pos;
      uint32_t cp = py::DecodeUtf8(s, &pos);
      std::string one = s.substr(start, pos - start);
      out += py::IsUpperCp(cp) ? py::Lower(one) : py::Upper(one);
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"old", "new", "count"}));
    if (!a[0].is_string() || !a[1].is_string()) {
      return absl::InvalidArgumentError("replace() arguments must be str");
    }
    ASSIGN_OR_RETURN(int64_t count, OptionalInt(a[2], -1));
    std::string out = py::Replace(s, a[0].str(), a[1].str(), count);
    RETURN_IF_ERROR(r.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"sub"}));
    if (!a[0].is_string()) return absl::InvalidArgumentError("must be str");
    const std::string& sub = a[0].str();
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(py::CodePointCount(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") {
        return absl::InvalidArgumentError("substring not found");
      }
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(py::CodePointCount(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"iterable"}));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence item ", i, ": expected str instance, ", items[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += items[i].str();
      RETURN_IF_ERROR(r.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit") {
    return AllCodePoints(s, [](uint32_t cp) { return cp >= '0' && cp <= '9'; });
  }
  if (name == "isalpha") return AllCodePoints(s, py::IsAlpha);
  if (name == "isalnum") {
    return AllCodePoints(s,
                         [](uint32_t cp) { return py::IsAlpha(cp) || (cp >= '0' && cp <= '9'); });
  }
  if (name == "isspace") return AllCodePoints(s, py::IsSpace);
  if (name == "isupper" || name == "islower") {
    bool want_upper = name == "isupper";
    bool any_cased = false;
    size_t pos = 0;
    while (pos < s.size()) {
      uint32_t cp = py::DecodeUtf8(s, &pos);
      if (py::IsUpperCp(cp) || py::IsLowerCp(cp)) {
        any_cased = true;
        if (py::IsUpperCp(cp) != want_upper) return Value::Bool(false);
      }
    }
    return Value::Bool(any_cased);
  }
  if (name == "format") return StrFormat(r, s, args);
  if (name == "ljust" || name == "rjust" || name == "center") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"width", "fillchar"}));
    return Justify(s, a, name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'str' object has no method '", std::string(name), "'"));
}

absl::StatusOr<Value> CallDictMethod(const Value& self, std::string_view name,
                                     const CallArgs& args) {
  const Dict& d = self.dict();
  if (name == "get") {
    ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"key", "default"}));
    if (const Value* v = d.Find(a[0])) return *v;
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  if (name == "copy") return self;
  std::vector<Value> out;
  out.reserve(d.size());
  for (const auto& [k, v] : d.items()) {
    if (name == "items") {
      out.push_back(Value::Tuple({k, v}));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> CallListMethod(const Value& self, std::string_view name,
                                     const CallArgs& args) {
  if (name == "copy") {
    RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    return self;
  }
  ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"value"}));
  const auto& items = self.items();
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!PyEquals(items[i], a[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") {
    return absl::InvalidArgumentError(absl::StrCat(PyRepr(a[0]), " is not in list"));
  }
  return Value::Int(count);
}

}  // namespace

bool HasMethod(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      return In(kStrMethods, name);
    case Value::Kind::kDict:
      return In(kDictSafe, name) || In(kDictUnsafe, name);
    case Value::Kind::kList:
      return In(kListSafe, name) || In(kListUnsafe, name);
    default:
      return false;
  }
}

absl::StatusOr<Value> CallMethod(Renderer& renderer, const Value& self, std::string_view name,
                                 CallArgs& args) {
  switch (self.kind()) {
    case Value::Kind::kString:
      return CallStrMethod(renderer, self, name, args);
    case Value::Kind::kDict:
      if (In(kDictUnsafe, name)) return Unsafe(self, name);
      return CallDictMethod(self, name, args);
    case Value::Kind::kList:
      if (In(kListUnsafe, name)) return Unsafe(self, name);
      return CallListMethod(self, name, args);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", self.TypeName(), "' object has no method '", std::string(name), "'"));
  }
}

}  // namespace xserv::chat_template
