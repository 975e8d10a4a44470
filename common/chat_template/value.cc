#include "common/chat_template/value.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/py_str.h"

namespace xserv::chat_template {
namespace {

const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}

absl::Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

template <typename T>
int Cmp3(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// Numbers compare by value across int/float/bool; ints compare exactly.
int CompareNumbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return Cmp3(a.as_int(), b.as_int());
  return Cmp3(a.as_double(), b.as_double());
}

bool EqualsImpl(const Value& a, const Value& b, uint32_t depth) {
  if (depth > kMaxValueDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!EqualsImpl(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.Find(k);
        if (other == nullptr || !EqualsImpl(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<int> CompareImpl(const Value& a, const Value& b, uint32_t depth) {
  if (depth > kMaxValueDepth) return TypeError("comparison nested too deeply");
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b);
  if (a.is_string() && b.is_string()) return Cmp3(a.str(), b.str());
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (EqualsImpl(x[i], y[i], depth + 1)) continue;
      return CompareImpl(x[i], y[i], depth + 1);
    }
    return Cmp3(x.size(), y.size());
  }
  return TypeError(absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '",
                                b.TypeName(), "'"));
}

void ReprImpl(const Value& v, std::string* out, uint32_t depth);

void ReprList(const Value& v, std::string* out, uint32_t depth) {
  const auto& items = v.items();
  out->push_back(v.is_tuple() ? '(' : '[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->append(", ");
    ReprImpl(items[i], out, depth + 1);
  }
  if (v.is_tuple() && items.size() == 1) out->push_back(',');
  out->push_back(v.is_tuple() ? ')' : ']');
}

void ReprDict(const Dict& d, std::string* out, uint32_t depth) {
  out->push_back('{');
  bool first = true;
  for (const auto& [k, val] : d.items()) {
    if (!first) out->append(", ");
    first = false;
    ReprImpl(k, out, depth + 1);
    out->append(": ");
    ReprImpl(val, out, depth + 1);
  }
  out->push_back('}');
}

void ReprImpl(const Value& v, std::string* out, uint32_t depth) {
  if (depth > kMaxValueDepth) {
    out->append("...");
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out->append("Undefined");
      return;
    case Value::Kind::kString:
      out->append(py::Repr(v.str()));
      return;
    case Value::Kind::kList:
      ReprList(v, out, depth);
      return;
    case Value::Kind::kDict:
      ReprDict(v.dict(), out, depth);
      return;
    case Value::Kind::kNamespace:
      out->append("<Namespace ");
      ReprDict(v.ns().attrs, out, depth);
      out->push_back('>');
      return;
    default:
      out->append(PyStr(v));
      return;
  }
}

absl::Status DumpImpl(const Value& v, const JsonDumpOptions& o, uint32_t depth, std::string* out);

void Newline(const JsonDumpOptions& o, uint32_t level, std::string* out) {
  out->push_back('\n');
  for (uint32_t i = 0; i < level; ++i) out->append(o.indent);
}

absl::StatusOr<std::string> JsonKey(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.str();
    case Value::Kind::kBool:
      return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return PyStr(k);
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return TypeError(
          absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
  }
}

absl::Status DumpDict(const Dict& d, const JsonDumpOptions& o, uint32_t depth, std::string* out) {
  if (d.empty()) {
    out->append("{}");
    return absl::OkStatus();
  }
  std::vector<const Dict::Item*> order;
  for (const auto& item : d.items()) order.push_back(&item);
  if (o.sort_keys) {
    for (const auto* item : order) {
      if (!item->first.is_string()) return TypeError("sort_keys requires string keys");
    }
    std::stable_sort(order.begin(), order.end(), [](const Dict::Item* a, const Dict::Item* b) {
      return a->first.str() < b->first.str();
    });
  }
  out->push_back('{');
  bool first = true;
  for (const auto* item : order) {
    if (!first) out->append(o.item_separator);
    first = false;
    if (o.has_indent) Newline(o, depth + 1, out);
    auto key = JsonKey(item->first);
    if (!key.ok()) return key.status();
    py::AppendJsonString(out, *key, o.ensure_ascii);
    out->append(o.key_separator);
    absl::Status s = DumpImpl(item->second, o, depth + 1, out);
    if (!s.ok()) return s;
  }
  if (o.has_indent) Newline(o, depth, out);
  out->push_back('}');
  return absl::OkStatus();
}

absl::Status DumpImpl(const Value& v, const JsonDumpOptions& o, uint32_t depth, std::string* out) {
  if (depth > kMaxValueDepth) return TypeError("value nested too deeply for tojson");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      out->append(std::to_string(v.as_int()));
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d > 0 ? "Infinity" : "-Infinity");
      } else {
        out->append(py::FloatRepr(d));
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      py::AppendJsonString(out, v.str(), o.ensure_ascii);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(o.item_separator);
        if (o.has_indent) Newline(o, depth + 1, out);
        absl::Status s = DumpImpl(items[i], o, depth + 1, out);
        if (!s.ok()) return s;
      }
      if (o.has_indent) Newline(o, depth, out);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict:
      return DumpDict(v.dict(), o, depth, out);
    case Value::Kind::kUndefined:
      return TypeError("Object of type Undefined is not JSON serializable");
    default:
      return TypeError(absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

template <typename Json>
absl::StatusOr<Value> FromJsonImpl(const Json& j, uint32_t depth) {
  if (depth > kMaxValueDepth) return absl::InvalidArgumentError("JSON input nested too deeply");
  switch (j.type()) {
    case nlohmann::detail::value_t::null:
    case nlohmann::detail::value_t::discarded:
      return Value::None();
    case nlohmann::detail::value_t::boolean:
      return Value::Bool(j.template get_ref<const bool&>());
    case nlohmann::detail::value_t::number_integer:
      return Value::Int(j.template get_ref<const int64_t&>());
    case nlohmann::detail::value_t::number_unsigned: {
      uint64_t u = j.template get_ref<const uint64_t&>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::detail::value_t::number_float:
      return Value::Float(j.template get_ref<const double&>());
    case nlohmann::detail::value_t::string:
      return Value::String(j.template get_ref<const std::string&>());
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        auto v = FromJsonImpl(e, depth + 1);
        if (!v.ok()) return v.status();
        items.push_back(*std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        auto v = FromJsonImpl(it.value(), depth + 1);
        if (!v.ok()) return v.status();
        d.Set(Value::String(it.key()), *std::move(v));
      }
      return Value::FromDict(std::move(d));
    }
    case nlohmann::detail::value_t::binary:
      return absl::InvalidArgumentError("binary JSON values are not supported");
  }
  return absl::InvalidArgumentError("unknown JSON value type");
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items) {
  auto data = std::make_shared<ListData>();
  uint32_t child_depth = 0;
  for (const Value& item : items) {
    child_depth = std::max(child_depth, item.depth());
    data->has_namespace = data->has_namespace || item.contains_namespace();
  }
  data->depth = child_depth + 1;
  data->items = std::move(items);
  Value v;
  v.kind_ = Kind::kList;
  v.ptr_ = std::shared_ptr<const ListData>(std::move(data));
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::FromDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.ptr_ = std::make_shared<const Dict>(std::move(dict));
  return v;
}

Value Value::NewNamespace() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ptr_ = std::make_shared<Namespace>();
  return v;
}

Value Value::Function(std::string name, Callable::Fn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::str() const {
  if (kind_ != Kind::kString) return EmptyString();
  return *std::get<std::shared_ptr<const std::string>>(ptr_);
}

const std::vector<Value>& Value::items() const {
  static const std::vector<Value>* empty = new std::vector<Value>();
  if (kind_ != Kind::kList) return *empty;
  return std::get<std::shared_ptr<const ListData>>(ptr_)->items;
}

const Dict& Value::dict() const {
  static const Dict* empty = new Dict();
  if (kind_ != Kind::kDict) return *empty;
  return *std::get<std::shared_ptr<const Dict>>(ptr_);
}

Namespace& Value::ns() const { return *std::get<std::shared_ptr<Namespace>>(ptr_); }

const Callable& Value::callable() const { return *std::get<std::shared_ptr<const Callable>>(ptr_); }

std::string Value::undefined_message() const {
  if (kind_ == Kind::kUndefined) {
    if (const auto* p = std::get_if<std::shared_ptr<const std::string>>(&ptr_)) return **p;
  }
  return "value is undefined";
}

uint32_t Value::depth() const {
  if (kind_ == Kind::kList) return std::get<std::shared_ptr<const ListData>>(ptr_)->depth;
  if (kind_ == Kind::kDict) return std::get<std::shared_ptr<const Dict>>(ptr_)->depth();
  return 0;
}

bool Value::contains_namespace() const {
  if (kind_ == Kind::kNamespace) return true;
  if (kind_ == Kind::kList) return std::get<std::shared_ptr<const ListData>>(ptr_)->has_namespace;
  if (kind_ == Kind::kDict) return std::get<std::shared_ptr<const Dict>>(ptr_)->has_namespace();
  return false;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !items().empty();
    case Kind::kDict:
      return !dict().empty();
    default:
      return true;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.str()));
  for (const auto& item : items_) {
    if (PyEquals(item.first, key)) return &item.second;
  }
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& item : items_) {
    if (item.first.is_string() && item.first.str() == key) return &item.second;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  depth_ = std::max(depth_, std::max(key.depth(), value.depth()) + 1);
  has_namespace_ = has_namespace_ || value.contains_namespace() || key.contains_namespace();
  for (auto& item : items_) {
    if (PyEquals(item.first, key)) {
      item.second = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

bool PyEquals(const Value& a, const Value& b) { return EqualsImpl(a, b, 0); }

absl::StatusOr<int> PyCompare(const Value& a, const Value& b) { return CompareImpl(a, b, 0); }

std::string PyStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return py::FloatRepr(v.as_double());
    case Value::Kind::kString:
      return v.str();
    case Value::Kind::kCallable:
      return absl::StrCat("<function ", v.callable().name, ">");
    default: {
      std::string out;
      ReprImpl(v, &out, 0);
      return out;
    }
  }
}

std::string PyRepr(const Value& v) {
  std::string out;
  ReprImpl(v, &out, 0);
  return out;
}

absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  absl::Status s = DumpImpl(v, options, 0, &out);
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Value> ValueFromJson(const nlohmann::json& json) { return FromJsonImpl(json, 0); }
absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& json) {
  return FromJsonImpl(json, 0);
}

}  // namespace xserv::chat_template
