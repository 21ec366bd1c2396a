// The operators of template expressions (docs/chat_template.md, "Syntax", "Printing",
// "Differences"): arithmetic on 64-bit integers (overflow and division by zero are errors) and
// doubles, `+` / `~` concatenation, comparisons and membership.
#pragma once

#include "text/chat_template/jinja_ast.h"
#include "text/chat_template/jinja_value.h"

namespace moert::text::jinja {

Value binary_operation(RenderHeap& heap, BinaryOp op, const Value& left, const Value& right);
Value negate(const Value& v);
// The spelling of an operator in messages: "+", "//", "in", "not in".
const char* operator_text(BinaryOp op);

}  // namespace moert::text::jinja
