// AST of a parsed template: expression and statement nodes.
//
// Ownership and threading: the parser builds the tree once; afterwards it is immutable and
// owned by its Template, so any number of renders may walk it concurrently. Nodes own their
// children through unique_ptr; literal Values inside nodes are immutable and safely shared.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat_template/lexer.h"
#include "common/chat_template/value.h"

namespace xserv::chat_template {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,    // value
  kName,       // name
  kList,       // items
  kTuple,      // items
  kDict,       // items as key, value, key, value, ...
  kGetAttr,    // object = children[0], name
  kGetItem,    // object = children[0], index = children[1]
  kSlice,      // object = children[0]; start/stop/step = children[1..3] (null when omitted)
  kCall,       // callee = children[0], args
  kFilter,     // input = children[0] (null inside a filter block), name, args
  kTest,       // input = children[0], name, args, negated
  kUnary,      // op ("not", "-", "+"), operand = children[0]
  kBinary,     // op, children[0], children[1]; includes "and"/"or"
  kConcat,     // `~` chain: children
  kCompare,    // children[0] then (ops[i], children[i + 1])
  kCondition,  // children[0] if children[1] else children[2] (children[2] may be null)
};

struct CallArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value value;       // kLiteral
  std::string name;  // kName, kGetAttr, kFilter, kTest; operator for kUnary/kBinary
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;  // kCompare operators: == != < <= > >= in notin
  CallArgsExpr args;             // kCall, kFilter, kTest
  bool negated = false;          // kTest: `is not`
  // kFilter/kTest whose name was unknown at parse time inside an `if` (jinja2 defers the
  // error to run time there).
  bool unknown = false;
};

// Assignment target: a name, an `ns.attr` reference or a (nested) tuple of names.
struct Target {
  enum class Kind { kName, kNamespaceAttr, kTuple } kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> elements;
  SourcePos pos;
};

enum class StmtKind {
  kOutput,  // text
  kEmit,    // {{ expr }}
  kIf,      // conditions/bodies, else_body
  kFor,
  kSet,       // target = expr
  kSetBlock,  // {% set target %}body{% endset %} with optional filter
  kMacro,
  kCallBlock,  // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kWith,
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %}, AssistantTracker)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                 // kOutput
  ExprPtr expr;                     // kEmit, kSet, kCallBlock (the call), kFor (iterable)
  std::vector<ExprPtr> conditions;  // kIf: one per branch
  std::vector<Body> bodies;         // kIf: one per branch
  Body body;                        // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith,
                                    // kScope
  Body else_body;                   // kIf, kFor
  Target target;                    // kFor, kSet, kSetBlock
  ExprPtr loop_filter;              // kFor: `for x in y if cond`
  ExprPtr filter;                   // kSetBlock (may be null), kFilterBlock: filter chain whose
                                    // innermost input is null
  std::string name;                 // kMacro
  std::vector<MacroParam> params;   // kMacro, kCallBlock (caller parameters)
  std::vector<std::pair<Target, ExprPtr>> assignments;  // kWith
};

}  // namespace xserv::chat_template
