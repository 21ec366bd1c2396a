// Builds the tree of a template from its tokens (docs/chat_template.md, "Syntax"): a recursive
// descent over statements and a precedence ladder over expressions. Every recursion and every
// node built passes a nesting check, so no input drives it (or any later walk of the tree)
// deeper than kMaxNesting levels.
#pragma once

#include <memory>
#include <string_view>

#include "text/chat_template/jinja_ast.h"

namespace moert::text::jinja {

// Throws ChatTemplateError (kSyntax) at the first syntax error.
std::shared_ptr<const Program> parse_program(std::string_view source);

}  // namespace moert::text::jinja
