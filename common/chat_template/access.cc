// Attribute, subscript and slice semantics of jinja2's sandboxed environment, iteration, and
// Python-style argument binding for builtins.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/chat_template/py_str.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

std::string NoAttribute(const Value& obj, std::string_view name) {
  return absl::StrCat("'", obj.TypeName(), " object' has no attribute '", std::string(name), "'");
}

Value BoundMethod(const Value& self, std::string_view name) {
  std::string method(name);
  return Value::Function(method, [self, method](Renderer& r, CallArgs& args) {
    return CallMethod(r, self, method, args);
  });
}

// Python's slice.indices(): clamps start/stop for a sequence of length n.
struct SliceBounds {
  int64_t start;
  int64_t stop;
  int64_t step;
};

absl::StatusOr<SliceBounds> ResolveSlice(int64_t n, const Value& start, const Value& stop,
                                         const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.as_int());
    return absl::InvalidArgumentError(
        absl::StrCat("slice indices must be integers or None, got ", v.TypeName(), " for ", what));
  };
  ASSIGN_OR_RETURN(auto st, as_index(step, "step"));
  int64_t s = st.value_or(1);
  if (s == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  int64_t lower = s > 0 ? 0 : -1;
  int64_t upper = s > 0 ? n : n - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  ASSIGN_OR_RETURN(auto b, as_index(start, "start"));
  ASSIGN_OR_RETURN(auto e, as_index(stop, "stop"));
  return SliceBounds{clamp(b, s > 0 ? lower : upper), clamp(e, s > 0 ? upper : lower), s};
}

template <typename F>
void ForEachSliceIndex(const SliceBounds& b, F f) {
  if (b.step > 0) {
    for (int64_t i = b.start; i < b.stop; i += b.step) f(i);
  } else {
    for (int64_t i = b.start; i > b.stop; i += b.step) f(i);
  }
}

}  // namespace

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_message());
  // The sandbox hides private and dunder attributes.
  if (!name.empty() && name[0] == '_') return Value::Undefined(NoAttribute(obj, name));
  if (HasMethod(obj, name)) return BoundMethod(obj, name);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(std::string_view(name))) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns().attrs.Find(std::string_view(name))) return *v;
  }
  return Value::Undefined(NoAttribute(obj, name));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_message());
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
    if (key.is_string()) return GetAttr(obj, key.str());
    return Value::Undefined(absl::StrCat("'dict object' has no attribute ", PyRepr(key)));
  }
  if (obj.is_namespace() && key.is_string()) return GetAttr(obj, key.str());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    } else {
      std::vector<size_t> offs = py::CodePointOffsets(obj.str());
      const int64_t n = static_cast<int64_t>(offs.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        size_t b = offs[static_cast<size_t>(i)];
        return Value::String(obj.str().substr(b, offs[static_cast<size_t>(i) + 1] - b));
      }
    }
    return Value::Undefined(absl::StrCat(obj.TypeName(), " object has no element ", key.as_int()));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute ", PyRepr(key)));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_message());
  if (obj.is_list()) {
    const auto& items = obj.items();
    ASSIGN_OR_RETURN(SliceBounds b,
                     ResolveSlice(static_cast<int64_t>(items.size()), start, stop, step));
    std::vector<Value> out;
    ForEachSliceIndex(b, [&](int64_t i) { out.push_back(items[static_cast<size_t>(i)]); });
    return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::vector<size_t> offs = py::CodePointOffsets(s);
    ASSIGN_OR_RETURN(SliceBounds b,
                     ResolveSlice(static_cast<int64_t>(offs.size()) - 1, start, stop, step));
    std::string out;
    if (b.step == 1) {
      if (b.stop > b.start) {
        out = s.substr(offs[static_cast<size_t>(b.start)],
                       offs[static_cast<size_t>(b.stop)] - offs[static_cast<size_t>(b.start)]);
      }
    } else {
      ForEachSliceIndex(b, [&](int64_t i) {
        size_t k = static_cast<size_t>(i);
        out.append(s, offs[k], offs[k + 1] - offs[k]);
      });
    }
    return Value::String(std::move(out));
  }
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, val] : v.dict().items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      size_t pos = 0;
      while (pos < s.size()) {
        size_t start = pos;
        py::DecodeUtf8(s, &pos);
        chars.push_back(Value::String(s.substr(start, pos - start)));
      }
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<std::vector<Value>> BindArgs(std::string_view fn, const CallArgs& args,
                                            std::initializer_list<std::string_view> params) {
  std::vector<Value> bound(params.size());
  std::vector<bool> set(params.size(), false);
  if (args.positional.size() > params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(fn), "' takes at most ",
                                                   params.size(), " argument(s), got ",
                                                   args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
    set[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(fn), "' got an unexpected keyword argument '", key, "'"));
    }
    size_t i = static_cast<size_t>(it - params.begin());
    if (set[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(fn), "' got multiple values for argument '", key, "'"));
    }
    bound[i] = value;
    set[i] = true;
  }
  return bound;
}

Value ToStringValue(const Value& v) { return v.is_string() ? v : Value::String(PyStr(v)); }

}  // namespace xserv::chat_template
