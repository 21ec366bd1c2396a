// Renders a parsed template with a context (docs/chat_template.md, "Design"): a tree walk over
// the program with a per-render heap, so that one Program serves many threads at once.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template/chat_template.h"
#include "text/chat_template/jinja_ast.h"

namespace moert::text::jinja {

// Throws ChatTemplateError (kRaised, kRuntime, kLimit) naming the line and column of the node
// being evaluated.
std::string render_program(const Program& program, const nlohmann::ordered_json& context, const RenderOptions& options);
std::string render_program(const Program& program, const nlohmann::json& context, const RenderOptions& options);

}  // namespace moert::text::jinja
