// Regular expressions (the ECMAScript syntax JSON Schema's `pattern` and `guided_regex` use, as
// JavaScript's RegExp with the `u` flag reads it) -> grammar expressions
// (docs/structured-output.md §Regex). Supported: literals, `.`, classes ([...], [^...], ranges,
// \d \D \w \W \s \S inside and outside classes), escapes (\n \r \t \f \v \0 \xHH \uHHHH \u{H..}
// and escaped punctuation), groups ( ), (?: ), (?<name> ), alternation, quantifiers * + ? {m}
// {m,} {m,n} (lazy forms denote the same language), `^` at the start and `$` at the end of a
// top-level alternative. Refused by name: backreferences, lookaround, \b \B, anchors elsewhere.
//
// The language is the regex's full matches. For JSON Schema's `pattern`, which is a search
// (unanchored), generating full matches is sound: every full match also contains a match.
#pragma once

#include <string_view>

#include "core/status.h"
#include "text/grammar/grammar.h"

namespace moert::grammar {

enum class RegexTarget {
  kRaw,         // the matched text itself, as UTF-8
  kJsonString,  // the matched text as it appears inside a JSON string literal: '"', '\\' and
                // control characters written as escapes, everything else as UTF-8
};

// The expression of `pattern`'s full matches. Errors name the offset and the construct.
Result<Expr> compile_regex(std::string_view pattern, RegexTarget target);
// compile_regex as a whole grammar (guided_regex).
Result<Grammar> compile_regex_grammar(std::string_view pattern);
// The expression for a set of code points in `target` form (a class, `.`, one character).
Expr codepoints_expr(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, RegexTarget target);

}  // namespace moert::grammar
