// Splits the prepared template text into tokens (docs/chat_template.md, "Whitespace control",
// "Syntax"): text between tags, the tag delimiters, and the words of the expressions inside.
// The `-` whitespace control of `{{- -}}`, `{%- -%}` and `{#- -#}` is applied here, to the
// neighbouring text; comments disappear; {% raw %} blocks become text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template/jinja_source.h"

namespace moert::text::jinja {

enum class TokenKind : uint8_t {
  kText,         // text: the literal text to print
  kOutputOpen,   // {{
  kOutputClose,  // }}
  kTagOpen,      // {%
  kTagClose,     // %}
  kName,         // text: identifier (keywords too: the parser tells them apart)
  kInt,          // integer
  kFloat,        // number
  kString,       // text: the decoded string
  kOperator,     // text: ( ) [ ] { } , . : | = + - * / // % ** ~ == != < > <= >=
  kEnd,          // the end of the source
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  uint32_t offset = 0;  // in the original source
  std::string text;
  int64_t integer = 0;
  double number = 0;

  bool is(TokenKind k, std::string_view t) const { return kind == k && text == t; }
  bool is_operator(std::string_view t) const { return is(TokenKind::kOperator, t); }
  bool is_name(std::string_view t) const { return is(TokenKind::kName, t); }
};

// Throws ChatTemplateError (kSyntax) for an unterminated string or comment, a bad escape, an
// unknown character, an integer out of range or a {% raw %} without {% endraw %}. The last
// token is always kEnd.
std::vector<Token> tokenize(const SourceText& source);

}  // namespace moert::text::jinja
