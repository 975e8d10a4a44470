// Parser: tokens to AST, following jinja2's grammar and precedence (parse_condexpr down to
// parse_primary), plus the compile-time checks jinja2 makes (unknown tags, filters and tests).
//
// Pure function of its input; thread-safe. Errors carry line and column.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/lexer.h"

namespace xserv::chat_template {

absl::StatusOr<Body> Parse(std::vector<Token> tokens);

}  // namespace xserv::chat_template
