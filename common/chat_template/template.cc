#include "common/chat_template/template.h"

#include "common/chat_template/ast.h"
#include "common/chat_template/lexer.h"
#include "common/chat_template/parser.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {

struct Template::Impl {
  Body body;
};

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::~Template() = default;

absl::StatusOr<std::shared_ptr<const Template>> Template::Parse(std::string_view source,
                                                                const TemplateOptions& options) {
  LexerOptions lexer_options;
  lexer_options.trim_blocks = options.trim_blocks;
  lexer_options.lstrip_blocks = options.lstrip_blocks;
  lexer_options.keep_trailing_newline = options.keep_trailing_newline;
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, lexer_options));
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->body, chat_template::Parse(std::move(tokens)));
  return std::shared_ptr<const Template>(new Template(std::move(impl)));
}

absl::StatusOr<std::string> Template::Render(const Value& variables,
                                             const RenderOptions& options) const {
  if (!variables.is_dict() && !variables.is_undefined()) {
    return absl::InvalidArgumentError("template variables must be a dict");
  }
  auto root = std::make_shared<Scope>(nullptr);
  for (const auto& [k, v] : variables.dict().items()) {
    if (!k.is_string())
      return absl::InvalidArgumentError("template variable names must be strings");
    root->Set(k.str(), v);
  }
  std::string out;
  Renderer renderer(options, &out);
  RETURN_IF_ERROR(renderer.RenderBody(impl_->body, root));
  return out;
}

}  // namespace xserv::chat_template
