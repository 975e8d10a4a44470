#include "common/chat_template/parser.h"

#include <initializer_list>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/expression_parser.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

using parse_internal::Contains;
using parse_internal::Describe;
using parse_internal::ExpressionParser;
using parse_internal::Names;

StmtPtr NewStmt(StmtKind kind, SourcePos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->pos = pos;
  return s;
}

// Statements (jinja2's subparse/parse_statement), assignment targets and loop-control checks.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  absl::StatusOr<Body> Run() {
    std::string found;
    auto body = Subparse({}, &found);
    if (!body.ok()) return body.status();
    return body;
  }

 private:
  // Parses statements until a block tag whose name is in `end_tags`; leaves the stream on that
  // name and stores it in *found.
  absl::StatusOr<Body> Subparse(Names end_tags, std::string* found) {
    Body body;
    while (true) {
      const Token& t = Cur();
      switch (t.kind) {
        case TokenKind::kData: {
          auto s = NewStmt(StmtKind::kOutput, t.pos);
          s->text = t.text;
          body.push_back(std::move(s));
          Advance();
          break;
        }
        case TokenKind::kVariableBegin: {
          auto s = NewStmt(StmtKind::kEmit, t.pos);
          Advance();
          ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
          if (Cur().kind != TokenKind::kVariableEnd)
            return Unexpected("end of print statement '}}'");
          Advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          Advance();
          if (Cur().kind == TokenKind::kName && Contains(end_tags, Cur().text)) {
            *found = Cur().text;
            return body;
          }
          ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kEof:
          if (end_tags.size() > 0) {
            std::string names;
            for (std::string_view n : end_tags) {
              absl::StrAppend(&names, names.empty() ? "" : " or ", "'", std::string(n), "'");
            }
            return ErrorAt(t, absl::StrCat("unexpected end of template, expected ", names));
          }
          return body;
        default:
          return ErrorAt(t, absl::StrCat("unexpected ", Describe(t)));
      }
    }
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    const Token& t = Cur();
    if (t.kind != TokenKind::kName) return ErrorAt(t, "expected a statement name after '{%'");
    const std::string name = t.text;
    if (name == "if") return ParseIf();
    if (name == "for") return ParseFor();
    if (name == "set") return ParseSet();
    if (name == "macro") return ParseMacro();
    if (name == "call") return ParseCallBlock();
    if (name == "filter") return ParseFilterBlock();
    if (name == "with") return ParseWith();
    if (name == "generation") return ParseScopeBlock("endgeneration");
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return ErrorAt(t, absl::StrCat("'", name, "' outside of a loop"));
      auto s = NewStmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, t.pos);
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    static constexpr std::string_view kUnsupported[] = {
        "extends", "block", "include", "import", "from", "do", "autoescape", "trans", "raw"};
    if (Contains(kUnsupported, name)) {
      return ErrorAt(t, absl::StrCat("tag '", name, "' is not supported"));
    }
    return ErrorAt(t, absl::StrCat("encountered unknown tag '", name, "'"));
  }

  // After Subparse stopped on `end_name`: consume it and the closing '%}'.
  absl::Status FinishEndTag() {
    Advance();
    return ExpectBlockEnd();
  }

  absl::StatusOr<StmtPtr> ParseIf() {
    auto s = NewStmt(StmtKind::kIf, Cur().pos);
    Advance();
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      std::string found;
      ASSIGN_OR_RETURN(Body body, Subparse({"elif", "else", "endif"}, &found));
      s->conditions.push_back(std::move(cond));
      s->bodies.push_back(std::move(body));
      if (found == "elif") {
        Advance();
        continue;
      }
      if (found == "else") {
        Advance();
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(s->else_body, Subparse({"endif"}, &found));
      }
      RETURN_IF_ERROR(FinishEndTag());
      return s;
    }
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    auto s = NewStmt(StmtKind::kFor, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(s->target, ParseAssignTarget({"in"}, false));
    if (!SkipName("in")) return Unexpected("'in'");
    ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive"}, false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(s->loop_filter, ParseExpression(true));
    }
    if (IsName("recursive")) return ErrorAt(Cur(), "recursive for loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string found;
    ++loop_depth_;
    auto body = Subparse({"endfor", "else"}, &found);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    if (found == "else") {
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->else_body, Subparse({"endfor"}, &found));
    }
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    auto s = NewStmt(StmtKind::kSet, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(s->target, ParseAssignTarget({}, true));
    if (SkipOp("=")) {
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (IsOp("|")) {
      ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, false));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string found;
    ASSIGN_OR_RETURN(s->body, Subparse({"endset"}, &found));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::Status ParseSignature(std::vector<MacroParam>* params) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      MacroParam p;
      ASSIGN_OR_RETURN(p.name, ExpectName());
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      }
      params->push_back(std::move(p));
    }
    Advance();  // ')'
    return absl::OkStatus();
  }

  // Bodies of macros and call blocks are functions: loop controls do not cross them.
  absl::StatusOr<Body> SubparseFunctionBody(std::string_view end_tag) {
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string found;
    auto body = Subparse({end_tag}, &found);
    loop_depth_ = saved_loop_depth;
    return body;
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    auto s = NewStmt(StmtKind::kMacro, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(s->name, ExpectName());
    RETURN_IF_ERROR(ParseSignature(&s->params));
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, SubparseFunctionBody("endmacro"));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseCallBlock() {
    auto s = NewStmt(StmtKind::kCallBlock, Cur().pos);
    Advance();
    if (IsOp("(")) RETURN_IF_ERROR(ParseSignature(&s->params));
    const Token& call_token = Cur();
    ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != ExprKind::kCall) return ErrorAt(call_token, "expected a call");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, SubparseFunctionBody("endcall"));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    auto s = NewStmt(StmtKind::kFilterBlock, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, true));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string found;
    ASSIGN_OR_RETURN(s->body, Subparse({"endfilter"}, &found));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    auto s = NewStmt(StmtKind::kWith, Cur().pos);
    Advance();
    while (Cur().kind != TokenKind::kBlockEnd) {
      if (!s->assignments.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(Target target, ParseAssignTarget({}, false));
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      s->assignments.emplace_back(std::move(target), std::move(value));
    }
    Advance();
    std::string found;
    ASSIGN_OR_RETURN(s->body, Subparse({"endwith"}, &found));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseScopeBlock(std::string_view end_tag) {
    auto s = NewStmt(StmtKind::kScope, Cur().pos);
    Advance();
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, SubparseFunctionBody(end_tag));
    RETURN_IF_ERROR(FinishEndTag());
    return s;
  }

  // ---- Assignment targets ----

  bool IsTargetEnd(Names extra_end) const {
    if (Cur().kind == TokenKind::kBlockEnd) return true;
    if (Cur().kind == TokenKind::kOperator &&
        (Cur().text == "=" || Cur().text == "|" || Cur().text == ")")) {
      return true;
    }
    return Cur().kind == TokenKind::kName && Contains(extra_end, Cur().text);
  }

  absl::StatusOr<Target> ParseTargetAtom() {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    Target t;
    t.pos = Cur().pos;
    if (SkipOp("(")) {
      ASSIGN_OR_RETURN(t, ParseTargetList({}));
      RETURN_IF_ERROR(ExpectOp(")"));
      return t;
    }
    if (Cur().kind != TokenKind::kName) return Unexpected("an assignment target name");
    static constexpr std::string_view kConstants[] = {"true", "false", "none",
                                                      "True", "False", "None"};
    if (Contains(kConstants, Cur().text)) return ErrorAt(Cur(), "cannot assign to a constant");
    t.name = Cur().text;
    Advance();
    return t;
  }

  absl::StatusOr<Target> ParseTargetList(Names extra_end) {
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.pos = Cur().pos;
    bool is_tuple = false;
    while (true) {
      if (!tuple.elements.empty() && IsTargetEnd(extra_end)) break;
      ASSIGN_OR_RETURN(Target atom, ParseTargetAtom());
      tuple.elements.push_back(std::move(atom));
      if (!SkipOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) return std::move(tuple.elements[0]);
    return tuple;
  }

  absl::StatusOr<Target> ParseAssignTarget(Names extra_end, bool with_namespace) {
    if (with_namespace && Cur().kind == TokenKind::kName &&
        PeekAt(1).kind == TokenKind::kOperator && PeekAt(1).text == ".") {
      Target t;
      t.kind = Target::Kind::kNamespaceAttr;
      t.pos = Cur().pos;
      t.name = Cur().text;
      Advance();
      Advance();
      ASSIGN_OR_RETURN(t.attr, ExpectName());
      return t;
    }
    return ParseTargetList(extra_end);
  }
  int loop_depth_ = 0;
};

// jinja2 resolves filter and test names when compiling, except inside `if` statements and
// conditional expressions ("soft" frames), where an unknown name fails only if evaluated.
class NameChecker {
 public:
  absl::Status CheckBody(const Body& body, bool soft) {
    for (const auto& s : body) RETURN_IF_ERROR(CheckStmt(*s, soft));
    return absl::OkStatus();
  }

 private:
  absl::Status CheckExpr(const Expr* e, bool soft) {
    if (e == nullptr) return absl::OkStatus();
    if ((e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest) && e->unknown && !soft) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template syntax error at line ", e->pos.line, ", column ", e->pos.column, ": no ",
          e->kind == ExprKind::kFilter ? "filter" : "test", " named '", e->name, "'"));
    }
    bool child_soft = soft || e->kind == ExprKind::kCondition;
    for (const auto& c : e->children) RETURN_IF_ERROR(CheckExpr(c.get(), child_soft));
    for (const auto& a : e->args.positional) RETURN_IF_ERROR(CheckExpr(a.get(), child_soft));
    for (const auto& [k, a] : e->args.keyword) RETURN_IF_ERROR(CheckExpr(a.get(), child_soft));
    RETURN_IF_ERROR(CheckExpr(e->args.star_args.get(), child_soft));
    return CheckExpr(e->args.star_kwargs.get(), child_soft);
  }

  absl::Status CheckStmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kIf:
        for (const auto& c : s.conditions) RETURN_IF_ERROR(CheckExpr(c.get(), true));
        for (const auto& b : s.bodies) RETURN_IF_ERROR(CheckBody(b, true));
        return CheckBody(s.else_body, true);
      case StmtKind::kEmit:
      case StmtKind::kSet:
        return CheckExpr(s.expr.get(), soft);
      case StmtKind::kFor:
        RETURN_IF_ERROR(CheckExpr(s.expr.get(), soft));
        RETURN_IF_ERROR(CheckExpr(s.loop_filter.get(), false));
        RETURN_IF_ERROR(CheckBody(s.body, false));
        return CheckBody(s.else_body, false);
      case StmtKind::kCallBlock:
        RETURN_IF_ERROR(CheckExpr(s.expr.get(), soft));
        break;
      case StmtKind::kWith:
        for (const auto& [t, e] : s.assignments) RETURN_IF_ERROR(CheckExpr(e.get(), soft));
        break;
      default:
        break;
    }
    for (const auto& p : s.params) RETURN_IF_ERROR(CheckExpr(p.default_value.get(), false));
    RETURN_IF_ERROR(CheckExpr(s.filter.get(), false));
    return CheckBody(s.body, false);
  }
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEof) {
    return absl::InternalError("token stream must end with kEof");
  }
  Parser parser(std::move(tokens));
  ASSIGN_OR_RETURN(Body body, parser.Run());
  NameChecker checker;
  RETURN_IF_ERROR(checker.CheckBody(body, false));
  return body;
}

}  // namespace xserv::chat_template