// Renderer: evaluates a parsed template body (statements and expressions) with jinja2's
// scoping rules. Internal to the library.
//
// Ownership and threading: one Renderer per render call, used by one thread, destroyed when the
// render ends. It borrows the immutable AST and writes into a caller-owned string. Builtins
// receive it to call back (macros, filters by name, limits, clock).
//
// Scoping follows jinja2's compiled frames: `for` iterations, macro calls, call/filter/set
// blocks and `with` get a fresh child scope whose writes do not leak out (each loop iteration
// starts again from the enclosing values); `if` bodies share their enclosing scope.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/template.h"
#include "common/chat_template/value.h"

namespace xserv::chat_template {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  // Looks the name up through the enclosing scopes; nullptr when not found.
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

// Adds "line L, column C" to an error that has no location yet (the innermost node wins).
absl::Status Locate(absl::Status status, SourcePos pos);

class Renderer {
 public:
  Renderer(const RenderOptions& options, std::string* out);

  absl::Status RenderBody(const Body& body, const ScopePtr& scope);

  // Calls any callable value (builtin, macro, bound method, caller).
  absl::StatusOr<Value> Call(const Value& callee, CallArgs& args);
  // Counts one evaluation step against the limit.
  absl::Status Step();
  // Fails when a string of `size` bytes would exceed the output limit.
  absl::Status CheckSize(size_t size) const;
  std::tm Now() const;
  const RenderLimits& limits() const { return options_.limits; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status RenderStmt(const Stmt& stmt, const ScopePtr& scope);
  absl::Status RenderFor(const Stmt& stmt, const ScopePtr& scope);
  absl::Status RenderIf(const Stmt& stmt, const ScopePtr& scope);
  absl::Status RenderCallBlock(const Stmt& stmt, const ScopePtr& scope);
  absl::Status Append(std::string_view text);
  // Renders `body` in a child scope into a fresh string.
  absl::StatusOr<std::string> Capture(const Body& body, const ScopePtr& scope);
  absl::Status Assign(const Target& target, const Value& value, const ScopePtr& scope);
  Value MakeMacro(const Stmt& stmt, const ScopePtr& scope);
  absl::StatusOr<Value> InvokeMacro(const Stmt& macro, const ScopePtr& closure, CallArgs& args);

  absl::StatusOr<Value> Eval(const Expr& expr, const ScopePtr& scope);
  absl::StatusOr<Value> EvalImpl(const Expr& expr, const ScopePtr& scope);
  absl::StatusOr<Value> EvalName(const Expr& expr, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCall(const Expr& expr, const ScopePtr& scope, const Value* caller);
  absl::Status EvalArgs(const CallArgsExpr& args, const ScopePtr& scope, CallArgs* out);
  absl::StatusOr<Value> EvalFilter(const Expr& expr, const ScopePtr& scope, const Value* input);
  absl::StatusOr<Value> EvalCompare(const Expr& expr, const ScopePtr& scope);
  absl::StatusOr<Value> EvalBinary(const Expr& expr, const ScopePtr& scope);

  const RenderOptions& options_;
  std::string* out_;
  Flow flow_ = Flow::kNormal;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

// Python binary operators (+ - * / // % **) and `in`, shared with filters.
absl::StatusOr<Value> BinaryOp(Renderer& renderer, std::string_view op, const Value& a,
                               const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

}  // namespace xserv::chat_template
