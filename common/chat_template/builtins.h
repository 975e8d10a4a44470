// Built-ins of the engine: jinja2 filters and tests, Python str/dict/list methods, attribute and
// subscript semantics of jinja2's sandbox, and the globals HF templates use (range, namespace,
// dict, raise_exception, strftime_now, ...).
//
// Stateless functions; everything per-render (limits, clock) is reached through the Renderer,
// so they are safe to call from many renders at once.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat_template/value.h"

namespace xserv::chat_template {

// Name lookups used by the parser: jinja2 rejects unknown filters/tests when compiling.
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(Renderer& renderer, std::string_view name, const Value& input,
                                  CallArgs& args);
absl::StatusOr<bool> ApplyTest(Renderer& renderer, std::string_view name, const Value& input,
                               CallArgs& args);

// `obj.name`: Python attribute first (methods), then item; Undefined when missing.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute for string keys; Undefined when missing.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` for lists, tuples and strings (null members are Undefined).
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step);

// True when `obj.name(...)` is a supported Python method call (str, dict, list).
bool HasMethod(const Value& obj, std::string_view name);
absl::StatusOr<Value> CallMethod(Renderer& renderer, const Value& self, std::string_view name,
                                 CallArgs& args);

// Globals available to every template; Undefined when `name` is not one.
Value LookupGlobal(std::string_view name);

// Iterates like Python's iter(): list/tuple items, dict keys, string code points; Undefined is
// empty. TypeError for non-iterables.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);

// Binds call arguments to named parameters the way Python does (positional first, then
// keywords); missing ones stay Undefined. `fn` names the callee in errors.
absl::StatusOr<std::vector<Value>> BindArgs(std::string_view fn, const CallArgs& args,
                                            std::initializer_list<std::string_view> params);

// Python str(x) as a string Value, keeping strings as they are.
Value ToStringValue(const Value& v);

}  // namespace xserv::chat_template
