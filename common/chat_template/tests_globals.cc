// jinja2's built-in tests (`x is defined`, ...) and the global functions HF chat templates see:
// jinja2's range/dict/namespace (range capped at the sandbox's MAX_RANGE) and transformers'
// raise_exception and strftime_now.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/py_str.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

constexpr std::string_view kTests[] = {
    "defined",     "undefined", "none",        "boolean", "false",    "true",     "integer",
    "float",       "number",    "string",      "mapping", "iterable", "sequence", "callable",
    "odd",         "even",      "divisibleby", "eq",      "equalto",  "==",       "ne",
    "!=",          "lt",        "lessthan",    "<",       "le",       "<=",       "gt",
    "greaterthan", ">",         "ge",          ">=",      "in",       "sameas",   "lower",
    "upper",       "escaped",   "filter",      "test"};

absl::StatusOr<int> CompareForTest(const Value& a, const Value& b) {
  if (a.is_undefined()) return absl::InvalidArgumentError(a.undefined_message());
  if (b.is_undefined()) return absl::InvalidArgumentError(b.undefined_message());
  return PyCompare(a, b);
}

absl::StatusOr<Value> Range(Renderer&, CallArgs& args) {
  if (!args.keyword.empty())
    return absl::InvalidArgumentError("range() takes no keyword arguments");
  std::vector<int64_t> v;
  for (const Value& a : args.positional) {
    if (!a.is_int() && !a.is_bool()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", a.TypeName(), "' object cannot be interpreted as an integer"));
    }
    v.push_back(a.as_int());
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (v.size() == 1) {
    stop = v[0];
  } else if (v.size() == 2 || v.size() == 3) {
    start = v[0];
    stop = v[1];
    if (v.size() == 3) step = v[2];
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("range expected 1 to 3 arguments, got ", v.size()));
  }
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && stop > start) count = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = ((__int128)start - stop - step - 1) / (-(__int128)step);
  if (count > kMaxRange) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
  }
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
    out.push_back(Value::Int(start + i * step));
  return Value::List(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) share argument handling.
absl::StatusOr<Dict> DictFromArgs(const CallArgs& args, std::string_view fn) {
  Dict d;
  if (args.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(fn), " expected at most 1 positional argument"));
  }
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else if (src.is_namespace()) {
      d = src.ns().attrs;
    } else {
      ASSIGN_OR_RETURN(std::vector<Value> pairs, Iterate(src));
      for (const Value& p : pairs) {
        if (!p.is_list() || p.items().size() != 2) {
          return absl::InvalidArgumentError(
              absl::StrCat(std::string(fn), " sequence elements must be pairs"));
        }
        d.Set(p.items()[0], p.items()[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
  return d;
}

absl::StatusOr<Value> NamespaceFn(Renderer&, CallArgs& args) {
  ASSIGN_OR_RETURN(Dict attrs, DictFromArgs(args, "namespace"));
  Value ns = Value::NewNamespace();
  for (const auto& [k, v] : attrs.items()) {
    if (v.contains_namespace()) {
      return absl::InvalidArgumentError("storing a namespace inside a namespace is not supported");
    }
    ns.ns().attrs.Set(k, v);
  }
  return ns;
}

absl::StatusOr<Value> DictFn(Renderer&, CallArgs& args) {
  ASSIGN_OR_RETURN(Dict d, DictFromArgs(args, "dict"));
  return Value::FromDict(std::move(d));
}

absl::StatusOr<Value> RaiseException(Renderer&, CallArgs& args) {
  std::string message = args.positional.empty() ? "" : PyStr(args.positional[0]);
  return absl::InvalidArgumentError(absl::StrCat("raise_exception: ", message));
}

absl::StatusOr<Value> StrftimeNow(Renderer& r, CallArgs& args) {
  ASSIGN_OR_RETURN(auto a, BindArgs("strftime_now", args, {"format"}));
  if (!a[0].is_string()) return absl::InvalidArgumentError("strftime_now expects a format string");
  std::tm tm = r.Now();
  const std::string& fmt = a[0].str();
  if (fmt.empty()) return Value::String("");
  for (size_t cap = 256; cap <= 65536; cap *= 4) {
    std::string buf(cap, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return Value::String(std::move(buf));
    }
  }
  return Value::String("");
}

}  // namespace

bool IsKnownTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<bool> ApplyTest(Renderer& r, std::string_view name, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(r.Step());
  const Value arg = args.positional.empty() ? Value() : args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // Undefined iterates as empty and has len() and __getitem__, so jinja2 answers true.
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
  }
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) return absl::InvalidArgumentError(v.undefined_message());
    Value divisor = name == "divisibleby" ? arg : Value::Int(2);
    ASSIGN_OR_RETURN(Value rem, BinaryOp(r, "%", v, divisor));
    if (name == "odd") return PyEquals(rem, Value::Int(1));
    return PyEquals(rem, Value::Int(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return PyEquals(v, arg);
  if (name == "ne" || name == "!=") return !PyEquals(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" ||
      name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    ASSIGN_OR_RETURN(int c, CompareForTest(v, arg));
    if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
    return c >= 0;
  }
  if (name == "in") return Contains(arg, v);
  if (name == "sameas") {
    if (v.kind() != arg.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == arg.as_bool();
    if (v.is_namespace() || v.is_callable() || v.is_list() || v.is_dict()) {
      return PyEquals(v, arg) && v.depth() == arg.depth();
    }
    return PyEquals(v, arg);
  }
  if (name == "lower" || name == "upper") {
    CallArgs none;
    ASSIGN_OR_RETURN(
        Value res, CallMethod(r, ToStringValue(v), name == "lower" ? "islower" : "isupper", none));
    return res.as_bool();
  }
  if (name == "escaped") return false;
  if (name == "filter") return v.is_string() && IsKnownFilter(v.str());
  if (name == "test") return v.is_string() && IsKnownTest(v.str());
  return absl::InvalidArgumentError(absl::StrCat("no test named '", std::string(name), "'"));
}

Value LookupGlobal(std::string_view name) {
  // Built once; Values are immutable and their callables stateless, so sharing is thread-safe.
  static const auto* globals = [] {
    auto* g = new std::vector<std::pair<std::string, Value>>();
    g->emplace_back("range", Value::Function("range", Range));
    g->emplace_back("namespace", Value::Function("namespace", NamespaceFn));
    g->emplace_back("dict", Value::Function("dict", DictFn));
    g->emplace_back("raise_exception", Value::Function("raise_exception", RaiseException));
    g->emplace_back("strftime_now", Value::Function("strftime_now", StrftimeNow));
    return g;
  }();
  for (const auto& [k, v] : *globals) {
    if (k == name) return v;
  }
  return Value();
}

}  // namespace xserv::chat_template
