#include "common/chat_template/expression_parser.h"

#include "common/chat_template/builtins.h"
#include "common/status.h"

namespace xserv::chat_template::parse_internal {
namespace {

ExprPtr NewExpr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

}  // namespace

bool ExpressionParser::IsTupleEnd(Names extra_end) const {
  const Token& t = Cur();
  if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd ||
      t.kind == TokenKind::kEof) {
    return true;
  }
  if (t.kind == TokenKind::kOperator && t.text == ")") return true;
  return t.kind == TokenKind::kName && Contains(extra_end, t.text);
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseTuple(bool simplified, bool with_condexpr,
                                                     Names extra_end, bool explicit_parentheses) {
  SourcePos pos = Cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    ExprPtr item;
    if (simplified) {
      ASSIGN_OR_RETURN(item, ParsePrimary());
    } else {
      ASSIGN_OR_RETURN(item, ParseExpression(with_condexpr));
    }
    items.push_back(std::move(item));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) return Unexpected("an expression");
  }
  auto e = NewExpr(ExprKind::kTuple, pos);
  e->children = std::move(items);
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(&depth_);
  RETURN_IF_ERROR(CheckDepth());
  if (!with_condexpr) return ParseOr();
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (SkipName("if")) {
    auto cond = NewExpr(ExprKind::kCondition, pos);
    ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr else_expr;
    if (SkipName("else")) {
      ASSIGN_OR_RETURN(else_expr, ParseExpression(true));
    }
    cond->children.push_back(std::move(expr1));
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(else_expr));
    expr1 = std::move(cond);
    pos = Cur().pos;
  }
  return expr1;
}

ExprPtr ExpressionParser::MakeBinary(const std::string& op, ExprPtr left, ExprPtr right,
                                     SourcePos pos) {
  auto e = NewExpr(ExprKind::kBinary, pos);
  e->name = op;
  e->children.push_back(std::move(left));
  e->children.push_back(std::move(right));
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseOr() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (SkipName("or")) {
    ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    left = MakeBinary("or", std::move(left), std::move(right), pos);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseAnd() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (SkipName("and")) {
    ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    left = MakeBinary("and", std::move(left), std::move(right), pos);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    auto e = NewExpr(ExprKind::kUnary, Cur().pos);
    Advance();
    e->name = "not";
    ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    e->children.push_back(std::move(operand));
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseCompare() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  auto e = NewExpr(ExprKind::kCompare, pos);
  e->children.push_back(std::move(first));
  while (true) {
    std::string op;
    if (Cur().kind == TokenKind::kOperator &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      Advance();
    } else if (IsName("in")) {
      op = "in";
      Advance();
    } else if (IsName("not") && PeekAt(1).kind == TokenKind::kName && PeekAt(1).text == "in") {
      op = "notin";
      Advance();
      Advance();
    } else {
      break;
    }
    ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    e->ops.push_back(op);
    e->children.push_back(std::move(operand));
  }
  if (e->ops.empty()) return std::move(e->children[0]);
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath1() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    std::string op = Cur().text;
    Advance();
    ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = MakeBinary(op, std::move(left), std::move(right), pos);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseConcat() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  auto e = NewExpr(ExprKind::kConcat, pos);
  e->children.push_back(std::move(first));
  while (SkipOp("~")) {
    ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    e->children.push_back(std::move(next));
  }
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath2() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    std::string op = Cur().text;
    Advance();
    ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = MakeBinary(op, std::move(left), std::move(right), pos);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePow() {
  SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (SkipOp("**")) {
    ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    left = MakeBinary("**", std::move(left), std::move(right), pos);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  RETURN_IF_ERROR(CheckDepth());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = NewExpr(ExprKind::kUnary, Cur().pos);
    node->name = Cur().text;
    Advance();
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->children.push_back(std::move(operand));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePrimary() {
  DepthGuard guard(&depth_);
  RETURN_IF_ERROR(CheckDepth());
  const Token& t = Cur();
  SourcePos pos = t.pos;
  switch (t.kind) {
    case TokenKind::kName: {
      auto e = NewExpr(ExprKind::kLiteral, pos);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      Advance();
      return e;
    }
    case TokenKind::kString: {
      std::string s;
      while (Cur().kind == TokenKind::kString) {
        s += Cur().text;
        Advance();
      }
      auto e = NewExpr(ExprKind::kLiteral, pos);
      e->value = Value::String(std::move(s));
      return e;
    }
    case TokenKind::kInteger:
    case TokenKind::kFloat: {
      auto e = NewExpr(ExprKind::kLiteral, pos);
      e->value =
          t.kind == TokenKind::kInteger ? Value::Int(t.int_value) : Value::Float(t.float_value);
      Advance();
      return e;
    }
    case TokenKind::kOperator:
      if (t.text == "(") {
        Advance();
        ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, true));
        RETURN_IF_ERROR(ExpectOp(")"));
        return e;
      }
      if (t.text == "[") return ParseListLiteral();
      if (t.text == "{") return ParseDictLiteral();
      break;
    default:
      break;
  }
  return ErrorAt(t, absl::StrCat("unexpected ", Describe(t)));
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseListLiteral() {
  auto e = NewExpr(ExprKind::kList, Cur().pos);
  Advance();
  while (!IsOp("]")) {
    if (!e->children.empty()) RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("]")) break;
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
    e->children.push_back(std::move(item));
  }
  Advance();
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseDictLiteral() {
  auto e = NewExpr(ExprKind::kDict, Cur().pos);
  Advance();
  while (!IsOp("}")) {
    if (!e->children.empty()) RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("}")) break;
    ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
    RETURN_IF_ERROR(ExpectOp(":"));
    ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    e->children.push_back(std::move(key));
    e->children.push_back(std::move(value));
  }
  Advance();
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      SourcePos pos = Cur().pos;
      Advance();
      if (Cur().kind == TokenKind::kName) {
        auto e = NewExpr(ExprKind::kGetAttr, pos);
        e->name = Cur().text;
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (Cur().kind == TokenKind::kInteger) {
        auto e = NewExpr(ExprKind::kGetItem, pos);
        auto index = NewExpr(ExprKind::kLiteral, Cur().pos);
        index->value = Value::Int(Cur().int_value);
        e->children.push_back(std::move(node));
        e->children.push_back(std::move(index));
        node = std::move(e);
      } else {
        return Unexpected("an attribute name");
      }
      Advance();
    } else if (IsOp("[")) {
      ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseSubscript(ExprPtr node) {
  SourcePos pos = Cur().pos;
  Advance();  // '['
  ExprPtr start;
  if (!IsOp(":")) {
    ASSIGN_OR_RETURN(start, ParseExpression(true));
    if (IsOp(",")) return ErrorAt(Cur(), "tuple subscripts are not supported");
    if (!IsOp(":")) {
      RETURN_IF_ERROR(ExpectOp("]"));
      auto e = NewExpr(ExprKind::kGetItem, pos);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(start));
      return e;
    }
  }
  Advance();  // ':'
  ExprPtr stop;
  ExprPtr step;
  if (!IsOp("]") && !IsOp(":")) {
    ASSIGN_OR_RETURN(stop, ParseExpression(true));
  }
  if (SkipOp(":")) {
    if (!IsOp("]")) {
      ASSIGN_OR_RETURN(step, ParseExpression(true));
    }
  }
  RETURN_IF_ERROR(ExpectOp("]"));
  auto e = NewExpr(ExprKind::kSlice, pos);
  e->children.push_back(std::move(node));
  e->children.push_back(std::move(start));
  e->children.push_back(std::move(stop));
  e->children.push_back(std::move(step));
  return e;
}

absl::Status ExpressionParser::ParseCallArgs(CallArgsExpr* args) {
  RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) RETURN_IF_ERROR(ExpectOp(","));
    first = false;
    if (IsOp(")")) break;
    if (SkipOp("*")) {
      ASSIGN_OR_RETURN(args->star_args, ParseExpression(true));
    } else if (SkipOp("**")) {
      ASSIGN_OR_RETURN(args->star_kwargs, ParseExpression(true));
    } else if (Cur().kind == TokenKind::kName && PeekAt(1).kind == TokenKind::kOperator &&
               PeekAt(1).text == "=") {
      std::string key = Cur().text;
      Advance();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      args->keyword.emplace_back(std::move(key), std::move(value));
    } else {
      if (!args->keyword.empty() || args->star_args || args->star_kwargs) {
        return ErrorAt(Cur(), "positional argument follows keyword argument");
      }
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      args->positional.push_back(std::move(value));
    }
  }
  Advance();  // ')'
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseCall(ExprPtr callee) {
  auto e = NewExpr(ExprKind::kCall, Cur().pos);
  e->children.push_back(std::move(callee));
  RETURN_IF_ERROR(ParseCallArgs(&e->args));
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (IsName("is")) {
      ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<std::string> ExpressionParser::ParseDottedName() {
  ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (IsOp(".") && PeekAt(1).kind == TokenKind::kName) {
    Advance();
    name += "." + Cur().text;
    Advance();
  }
  return name;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilter(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Advance();
    start_inline = false;
    auto e = NewExpr(ExprKind::kFilter, Cur().pos);
    ASSIGN_OR_RETURN(e->name, ParseDottedName());
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(&e->args));
    e->unknown = !IsKnownFilter(e->name);
    e->children.push_back(std::move(node));
    node = std::move(e);
  }
  return node;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseTest(ExprPtr node) {
  auto e = NewExpr(ExprKind::kTest, Cur().pos);
  Advance();  // 'is'
  e->negated = SkipName("not");
  ASSIGN_OR_RETURN(e->name, ParseDottedName());
  e->unknown = !IsKnownTest(e->name);
  e->children.push_back(std::move(node));
  const Token& t = Cur();
  if (IsOp("(")) {
    RETURN_IF_ERROR(ParseCallArgs(&e->args));
  } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
              t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat ||
              (t.kind == TokenKind::kOperator &&
               (t.text == "(" || t.text == "[" || t.text == "{"))) &&
             !(t.kind == TokenKind::kName &&
               (t.text == "else" || t.text == "or" || t.text == "and"))) {
    if (IsName("is")) return ErrorAt(t, "cannot chain multiple tests with 'is'");
    ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->args.positional.push_back(std::move(arg));
  }
  return e;
}

}  // namespace xserv::chat_template::parse_internal
