// ExpressionParser: jinja2's expression grammar, from parse_tuple/parse_condexpr down to
// parse_primary, with postfix access, calls, filters and tests (same precedence as jinja2).
//
// Internal to the parser; one instance per Parse() call, used by one thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/token_stream.h"

namespace xserv::chat_template::parse_internal {

class ExpressionParser : public TokenStream {
 public:
  using TokenStream::TokenStream;

  // jinja2's parse_tuple: comma-separated expressions (a Tuple node once a comma is seen),
  // ending at '}}', '%}', ')' or a name in `extra_end`; `simplified` parses primaries only.
  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr, Names extra_end,
                                     bool explicit_parentheses);
  // `with_condexpr` allows `a if c else b` at the top level.
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  // `|name(args)` chain applied to `node` (null inside filter blocks).
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);

 protected:
  bool IsTupleEnd(Names extra_end) const;
  ExprPtr MakeBinary(const std::string& op, ExprPtr left, ExprPtr right, SourcePos pos);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseListLiteral();
  absl::StatusOr<ExprPtr> ParseDictLiteral();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::Status ParseCallArgs(CallArgsExpr* args);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<std::string> ParseDottedName();
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
};

}  // namespace xserv::chat_template::parse_internal
