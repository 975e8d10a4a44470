// Value: the dynamic, Python-like value a template computes with (undefined, None, bool, int,
// float, str, list/tuple, insertion-ordered dict, jinja2 namespace, callable).
//
// Ownership and threading: a Value is a small handle; strings, lists and dicts are immutable
// once built and shared by reference count, so copying is cheap and values baked into a parsed
// template (literals) may be read from many render threads at once. The one mutable kind is
// Namespace (jinja2's `namespace()`), which only exists inside a single render and must not be
// shared across threads. Lists and dicts are immutable because HF renders templates in
// jinja2's ImmutableSandboxedEnvironment, where `list.append` and friends are refused anyway.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace xserv::chat_template {

class Value;
class Dict;
class Renderer;  // the evaluator; builtins and macros receive it to call back into it

// Containers nested deeper than this are refused (printing, comparing and destroying values
// recurse, so unbounded nesting built by a hostile template could exhaust the stack).
inline constexpr uint32_t kMaxValueDepth = 256;

// Arguments of a call, filter or test (the value being filtered/tested is not included).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  using Fn = std::function<absl::StatusOr<Value>(Renderer&, CallArgs&)>;
  std::string name;
  Fn fn;
};

struct Namespace;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple (see is_tuple())
    kDict,
    kNamespace,
    kCallable,
  };

  struct ListData {
    std::vector<Value> items;
    uint32_t depth = 1;
    bool has_namespace = false;
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value FromDict(Dict dict);
  static Value NewNamespace();
  static Value Function(std::string name, Callable::Fn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // bool is a number in Python (True + 1 == 2).
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  // Integer value of an int or bool.
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  // Numeric value of an int, bool or float.
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const;
  const std::vector<Value>& items() const;  // list/tuple elements
  const Dict& dict() const;
  Namespace& ns() const;
  const Callable& callable() const;
  // Why the value is undefined (e.g. "'dict object' has no attribute 'x'"), for error messages.
  std::string undefined_message() const;

  // Nesting depth of containers (1 for a flat list), 0 for scalars.
  uint32_t depth() const;
  bool contains_namespace() const;

  bool Truthy() const;
  // Python type name for messages: "str", "int", "list", "dict", "NoneType", ...
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::variant<std::monostate, std::shared_ptr<const std::string>, std::shared_ptr<const ListData>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Callable>>
      ptr_;
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
class Dict {
 public:
  using Item = std::pair<Value, Value>;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts at the end, or replaces the value in place when the key exists (Python order).
  void Set(Value key, Value value);
  const std::vector<Item>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  uint32_t depth() const { return depth_; }
  bool has_namespace() const { return has_namespace_; }

 private:
  std::vector<Item> items_;
  uint32_t depth_ = 1;
  bool has_namespace_ = false;
};

struct Namespace {
  Dict attrs;
};

// Python `a == b` (jinja2 Undefined equals only Undefined).
bool PyEquals(const Value& a, const Value& b);
// Python ordering for `<`: -1, 0 or 1; TypeError for unorderable types.
absl::StatusOr<int> PyCompare(const Value& a, const Value& b);
// Python str(): what `{{ value }}` prints (undefined prints nothing).
std::string PyStr(const Value& v);
// Python repr(): what a value looks like inside a printed list or dict.
std::string PyRepr(const Value& v);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent (json.dumps indent=N means N spaces)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) with Python's formatting; TypeError for undefined, namespaces, callables.
absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options);

// Converts parsed JSON (e.g. OpenAI messages) into template values. The single adapter between
// nlohmann::json and the engine: it never throws, and refuses nesting deeper than
// kMaxValueDepth. Object key order is kept as the JSON type stores it: callers that need
// transformers-exact output (tool schemas printed with tojson) must parse request bodies as
// nlohmann::ordered_json, because nlohmann::json sorts keys.
absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& json);
absl::StatusOr<Value> ValueFromJson(const nlohmann::json& json);

}  // namespace xserv::chat_template
