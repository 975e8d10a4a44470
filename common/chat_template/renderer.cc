#include "common/chat_template/renderer.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

constexpr char kLocatedPayload[] = "xserv.chat_template/located";

bool IsLocated(const absl::Status& s) { return s.GetPayload(kLocatedPayload).has_value(); }

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_message());
}

}  // namespace

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

absl::Status Locate(absl::Status status, SourcePos pos) {
  if (status.ok() || IsLocated(status)) return status;
  absl::Status located(status.code(),
                       absl::StrCat("template error at line ", pos.line, ", column ", pos.column,
                                    ": ", std::string(status.message())));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

Renderer::Renderer(const RenderOptions& options, std::string* out) : options_(options), out_(out) {}

absl::Status Renderer::Step() {
  if (++steps_ > options_.limits.max_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template exceeded the step limit (", options_.limits.max_steps, ")"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::CheckSize(size_t size) const {
  if (size > options_.limits.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("template output exceeds the limit of ",
                                                     options_.limits.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

std::tm Renderer::Now() const {
  if (options_.now) return options_.now();
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

absl::Status Renderer::Append(std::string_view text) {
  RETURN_IF_ERROR(CheckSize(out_->size() + text.size()));
  out_->append(text);
  return absl::OkStatus();
}

absl::Status Renderer::RenderBody(const Body& body, const ScopePtr& scope) {
  for (const auto& stmt : body) {
    RETURN_IF_ERROR(Step());
    absl::Status s = RenderStmt(*stmt, scope);
    if (!s.ok()) return Locate(std::move(s), stmt->pos);
    if (flow_ != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Renderer::Capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  absl::Status s = RenderBody(body, std::make_shared<Scope>(scope));
  out_ = saved;
  if (!s.ok()) return s;
  return buffer;
}

absl::Status Renderer::RenderStmt(const Stmt& stmt, const ScopePtr& scope) {
  switch (stmt.kind) {
    case StmtKind::kOutput:
      return Append(stmt.text);
    case StmtKind::kEmit: {
      ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
      if (v.is_string()) return Append(v.str());
      return Append(PyStr(v));
    }
    case StmtKind::kIf:
      return RenderIf(stmt, scope);
    case StmtKind::kFor:
      return RenderFor(stmt, scope);
    case StmtKind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
      return Assign(stmt.target, v, scope);
    }
    case StmtKind::kSetBlock: {
      ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, scope));
      Value v = Value::String(std::move(text));
      if (stmt.filter) {
        ASSIGN_OR_RETURN(v, EvalFilter(*stmt.filter, scope, &v));
      }
      return Assign(stmt.target, v, scope);
    }
    case StmtKind::kMacro:
      scope->Set(stmt.name, MakeMacro(stmt, scope));
      return absl::OkStatus();
    case StmtKind::kCallBlock:
      return RenderCallBlock(stmt, scope);
    case StmtKind::kFilterBlock: {
      ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, scope));
      Value input = Value::String(std::move(text));
      ASSIGN_OR_RETURN(Value v, EvalFilter(*stmt.filter, scope, &input));
      return Append(PyStr(v));
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [target, expr] : stmt.assignments) {
        ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
        RETURN_IF_ERROR(Assign(target, v, inner));
      }
      return RenderBody(stmt.body, inner);
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
    case StmtKind::kScope:
      return RenderBody(stmt.body, std::make_shared<Scope>(scope));
  }
  return absl::InternalError("unknown statement kind");
}

absl::Status Renderer::RenderIf(const Stmt& stmt, const ScopePtr& scope) {
  for (size_t i = 0; i < stmt.conditions.size(); ++i) {
    ASSIGN_OR_RETURN(Value cond, Eval(*stmt.conditions[i], scope));
    if (cond.Truthy()) return RenderBody(stmt.bodies[i], scope);
  }
  return RenderBody(stmt.else_body, scope);
}

absl::Status Renderer::RenderFor(const Stmt& stmt, const ScopePtr& scope) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr, scope));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
  if (stmt.loop_filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      RETURN_IF_ERROR(Step());
      auto test_scope = std::make_shared<Scope>(scope);
      RETURN_IF_ERROR(Assign(stmt.target, item, test_scope));
      ASSIGN_OR_RETURN(Value keep, Eval(*stmt.loop_filter, test_scope));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(Step());
    auto iter_scope = std::make_shared<Scope>(scope);
    RETURN_IF_ERROR(Assign(stmt.target, items[static_cast<size_t>(i)], iter_scope));
    Dict loop;
    loop.Set(Value::String("index"), Value::Int(i + 1));
    loop.Set(Value::String("index0"), Value::Int(i));
    loop.Set(Value::String("revindex"), Value::Int(n - i));
    loop.Set(Value::String("revindex0"), Value::Int(n - i - 1));
    loop.Set(Value::String("first"), Value::Bool(i == 0));
    loop.Set(Value::String("last"), Value::Bool(i == n - 1));
    loop.Set(Value::String("length"), Value::Int(n));
    loop.Set(Value::String("depth"), Value::Int(1));
    loop.Set(Value::String("depth0"), Value::Int(0));
    if (i > 0) loop.Set(Value::String("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.Set(Value::String("nextitem"), items[static_cast<size_t>(i + 1)]);
    loop.Set(Value::String("cycle"),
             Value::Function("loop.cycle", [i](Renderer&, CallArgs& args) -> absl::StatusOr<Value> {
               if (args.positional.empty()) {
                 return absl::InvalidArgumentError("no items for cycling given");
               }
               return args.positional[static_cast<size_t>(i) % args.positional.size()];
             }));
    iter_scope->Set("loop", Value::FromDict(std::move(loop)));
    RETURN_IF_ERROR(RenderBody(stmt.body, iter_scope));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  if (n == 0 && !stmt.else_body.empty()) {
    return RenderBody(stmt.else_body, std::make_shared<Scope>(scope));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Assign(const Target& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope->Set(target.name, value);
      return absl::OkStatus();
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope->Find(target.name);
      if (ns == nullptr || !ns->is_namespace()) {
        return absl::InvalidArgumentError("can only assign attributes on namespace objects");
      }
      if (value.contains_namespace()) {
        return absl::InvalidArgumentError(
            "storing a namespace inside a namespace is not supported");
      }
      ns->ns().attrs.Set(Value::String(target.attr), value);
      return absl::OkStatus();
    }
    case Target::Kind::kTuple: {
      ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      if (items.size() != target.elements.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            items.size() < target.elements.size() ? "not enough" : "too many",
            " values to unpack (expected ", target.elements.size(), ", got ", items.size(), ")"));
      }
      for (size_t i = 0; i < items.size(); ++i) {
        RETURN_IF_ERROR(Assign(target.elements[i], items[i], scope));
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown target kind");
}

Value Renderer::MakeMacro(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* macro = &stmt;
  ScopePtr closure = scope;
  return Value::Function(stmt.name, [macro, closure](Renderer& r, CallArgs& args) {
    return r.InvokeMacro(*macro, closure, args);
  });
}

absl::StatusOr<Value> Renderer::InvokeMacro(const Stmt& macro, const ScopePtr& closure,
                                            CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("macro calls nested deeper than ", options_.limits.max_call_depth));
  }
  auto scope = std::make_shared<Scope>(closure);
  std::vector<bool> bound(macro.params.size(), false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < macro.params.size()) {
      scope->Set(macro.params[i].name, args.positional[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  Dict kwargs;
  bool has_caller = false;
  for (auto& [key, value] : args.keyword) {
    bool matched = false;
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (macro.params[i].name != key) continue;
      if (bound[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("macro '", macro.name, "' got multiple values for argument '", key, "'"));
      }
      scope->Set(key, value);
      bound[i] = true;
      matched = true;
    }
    if (matched) continue;
    if (key == "caller") {
      scope->Set("caller", value);
      has_caller = true;
    } else {
      kwargs.Set(Value::String(key), value);
    }
  }
  for (size_t i = 0; i < macro.params.size(); ++i) {
    if (bound[i]) continue;
    const MacroParam& p = macro.params[i];
    if (p.default_value) {
      ASSIGN_OR_RETURN(Value v, Eval(*p.default_value, scope));
      scope->Set(p.name, std::move(v));
    } else {
      scope->Set(p.name,
                 Value::Undefined(absl::StrCat("parameter '", p.name, "' was not provided")));
    }
  }
  scope->Set("varargs", Value::Tuple(std::move(varargs)));
  scope->Set("kwargs", Value::FromDict(std::move(kwargs)));
  if (!has_caller && scope->Find("caller") == nullptr) {
    scope->Set("caller", Value::Undefined("'caller' is undefined"));
  }
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  ++call_depth_;
  absl::Status s = RenderBody(macro.body, scope);
  --call_depth_;
  out_ = saved;
  flow_ = Flow::kNormal;
  if (!s.ok()) return s;
  return Value::String(std::move(buffer));
}

absl::Status Renderer::RenderCallBlock(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* block = &stmt;
  ScopePtr call_site = scope;
  Value caller = Value::Function(
      "caller", [block, call_site](Renderer& r, CallArgs& args) -> absl::StatusOr<Value> {
        auto inner = std::make_shared<Scope>(call_site);
        for (size_t i = 0; i < block->params.size(); ++i) {
          const MacroParam& p = block->params[i];
          if (i < args.positional.size()) {
            inner->Set(p.name, args.positional[i]);
            continue;
          }
          const Value* kw = nullptr;
          for (const auto& [k, v] : args.keyword) {
            if (k == p.name) kw = &v;
          }
          if (kw != nullptr) {
            inner->Set(p.name, *kw);
          } else if (p.default_value) {
            ASSIGN_OR_RETURN(Value v, r.Eval(*p.default_value, inner));
            inner->Set(p.name, std::move(v));
          } else {
            inner->Set(p.name, Value::Undefined(absl::StrCat("'", p.name, "' is undefined")));
          }
        }
        std::string buffer;
        std::string* saved = r.out_;
        r.out_ = &buffer;
        absl::Status s = r.RenderBody(block->body, inner);
        r.out_ = saved;
        r.flow_ = Flow::kNormal;
        if (!s.ok()) return s;
        return Value::String(std::move(buffer));
      });
  ASSIGN_OR_RETURN(Value result, EvalCall(*stmt.expr, scope, &caller));
  return Append(PyStr(result));
}

absl::StatusOr<Value> Renderer::Call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.callable().fn(*this, args);
  if (callee.is_undefined()) return UndefinedError(callee);
  return absl::InvalidArgumentError(
      absl::StrCat("'", callee.TypeName(), "' object is not callable"));
}

absl::StatusOr<Value> Renderer::Eval(const Expr& expr, const ScopePtr& scope) {
  RETURN_IF_ERROR(Step());
  auto v = EvalImpl(expr, scope);
  if (!v.ok()) return Locate(v.status(), expr.pos);
  if (v->depth() > kMaxValueDepth) {
    return Locate(absl::InvalidArgumentError("value nested too deeply"), expr.pos);
  }
  return v;
}

absl::StatusOr<Value> Renderer::EvalName(const Expr& expr, const ScopePtr& scope) {
  if (const Value* v = scope->Find(expr.name)) return *v;
  Value global = LookupGlobal(expr.name);
  if (!global.is_undefined()) return global;
  return Value::Undefined(absl::StrCat("'", expr.name, "' is undefined"));
}

absl::Status Renderer::EvalArgs(const CallArgsExpr& args, const ScopePtr& scope, CallArgs* out) {
  for (const auto& e : args.positional) {
    ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
    out->positional.push_back(std::move(v));
  }
  if (args.star_args) {
    ASSIGN_OR_RETURN(Value v, Eval(*args.star_args, scope));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    for (Value& item : items) out->positional.push_back(std::move(item));
  }
  for (const auto& [key, e] : args.keyword) {
    ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
    out->keyword.emplace_back(key, std::move(v));
  }
  if (args.star_kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*args.star_kwargs, scope));
    if (!v.is_dict()) return absl::InvalidArgumentError("argument after ** must be a mapping");
    for (const auto& [k, val] : v.dict().items()) {
      if (!k.is_string()) return absl::InvalidArgumentError("keywords must be strings");
      out->keyword.emplace_back(k.str(), val);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& expr, const ScopePtr& scope,
                                         const Value* caller) {
  const Expr& callee = *expr.children[0];
  CallArgs args;
  if (callee.kind == ExprKind::kGetAttr) {
    ASSIGN_OR_RETURN(Value self, Eval(*callee.children[0], scope));
    if (HasMethod(self, callee.name)) {
      RETURN_IF_ERROR(EvalArgs(expr.args, scope, &args));
      return CallMethod(*this, self, callee.name, args);
    }
    ASSIGN_OR_RETURN(Value fn, GetAttr(self, callee.name));
    RETURN_IF_ERROR(EvalArgs(expr.args, scope, &args));
    if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
    return Call(fn, args);
  }
  ASSIGN_OR_RETURN(Value fn, Eval(callee, scope));
  RETURN_IF_ERROR(EvalArgs(expr.args, scope, &args));
  if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
  return Call(fn, args);
}

absl::StatusOr<Value> Renderer::EvalFilter(const Expr& expr, const ScopePtr& scope,
                                           const Value* input) {
  Value base;
  if (expr.children[0] == nullptr) {
    if (input == nullptr) return absl::InternalError("filter without input");
    base = *input;
  } else if (expr.children[0]->kind == ExprKind::kFilter) {
    ASSIGN_OR_RETURN(base, EvalFilter(*expr.children[0], scope, input));
  } else {
    ASSIGN_OR_RETURN(base, Eval(*expr.children[0], scope));
  }
  CallArgs args;
  RETURN_IF_ERROR(EvalArgs(expr.args, scope, &args));
  auto result = ApplyFilter(*this, expr.name, base, args);
  if (!result.ok()) return Locate(result.status(), expr.pos);
  return result;
}

absl::StatusOr<Value> Renderer::EvalCompare(const Expr& expr, const ScopePtr& scope) {
  ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1], scope));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "==") {
      result = PyEquals(left, right);
    } else if (op == "!=") {
      result = !PyEquals(left, right);
    } else if (op == "in" || op == "notin") {
      ASSIGN_OR_RETURN(bool found, Contains(right, left));
      result = (op == "in") == found;
    } else {
      if (left.is_undefined()) return UndefinedError(left);
      if (right.is_undefined()) return UndefinedError(right);
      auto cmp = PyCompare(left, right);
      if (!cmp.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", op, "' not supported between instances of '", left.TypeName(),
                         "' and '", right.TypeName(), "'"));
      }
      if (op == "<") result = *cmp < 0;
      if (op == "<=") result = *cmp <= 0;
      if (op == ">") result = *cmp > 0;
      if (op == ">=") result = *cmp >= 0;
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Renderer::EvalBinary(const Expr& expr, const ScopePtr& scope) {
  ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
  if (expr.name == "and") {
    if (!left.Truthy()) return left;
    return Eval(*expr.children[1], scope);
  }
  if (expr.name == "or") {
    if (left.Truthy()) return left;
    return Eval(*expr.children[1], scope);
  }
  ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1], scope));
  return BinaryOp(*this, expr.name, left, right);
}

absl::StatusOr<Value> Renderer::EvalImpl(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.value;
    case ExprKind::kName:
      return EvalName(expr, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const auto& c : expr.children) {
        ASSIGN_OR_RETURN(Value v, Eval(*c, scope));
        items.push_back(std::move(v));
      }
      return expr.kind == ExprKind::kList ? Value::List(std::move(items))
                                          : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*expr.children[i], scope));
        ASSIGN_OR_RETURN(Value v, Eval(*expr.children[i + 1], scope));
        if (k.is_list() && !k.is_tuple())
          return absl::InvalidArgumentError("unhashable type: 'list'");
        if (k.is_dict()) return absl::InvalidArgumentError("unhashable type: 'dict'");
        d.Set(std::move(k), std::move(v));
      }
      return Value::FromDict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], scope));
      return GetAttr(obj, expr.name);
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], scope));
      ASSIGN_OR_RETURN(Value key, Eval(*expr.children[1], scope));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], scope));
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (expr.children[static_cast<size_t>(i) + 1]) {
          ASSIGN_OR_RETURN(parts[i], Eval(*expr.children[static_cast<size_t>(i) + 1], scope));
        }
      }
      return GetSlice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return EvalCall(expr, scope, nullptr);
    case ExprKind::kFilter:
      return EvalFilter(expr, scope, nullptr);
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(Value input, Eval(*expr.children[0], scope));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(expr.args, scope, &args));
      ASSIGN_OR_RETURN(bool result, ApplyTest(*this, expr.name, input, args));
      return Value::Bool(result != expr.negated);
    }
    case ExprKind::kUnary: {
      ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0], scope));
      if (expr.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_undefined()) return UndefinedError(v);
      if (!v.is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad operand type for unary ", expr.name, ": '", v.TypeName(), "'"));
      }
      if (expr.name == "+") return v.is_bool() ? Value::Int(v.as_int()) : v;
      if (v.is_float()) return Value::Float(-v.as_double());
      if (v.as_int() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
      return Value::Int(-v.as_int());
    }
    case ExprKind::kBinary:
      return EvalBinary(expr, scope);
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& c : expr.children) {
        ASSIGN_OR_RETURN(Value v, Eval(*c, scope));
        s += v.is_string() ? v.str() : PyStr(v);
        RETURN_IF_ERROR(CheckSize(s.size()));
      }
      return Value::String(std::move(s));
    }
    case ExprKind::kCompare:
      return EvalCompare(expr, scope);
    case ExprKind::kCondition: {
      ASSIGN_OR_RETURN(Value test, Eval(*expr.children[1], scope));
      if (test.Truthy()) return Eval(*expr.children[0], scope);
      if (expr.children[2]) return Eval(*expr.children[2], scope);
      return Value::Undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return absl::InternalError("unknown expression kind");
}

}  // namespace xserv::chat_template
