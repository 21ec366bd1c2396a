// GBNF, llama.cpp's grammar syntax, as the text form of `guided_grammar`
// (docs/structured-output.md §Grammars):
//   root  ::= "{" ws pair ("," ws pair)* "}"      # the start rule is `root`
//   pair  ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws    ::= [ \t\n]*
// Terminals: "strings" and [classes] ([^...] negated, a-z ranges) of Unicode code points with
// escapes \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH; `.` any code point; rule names
// [A-Za-z0-9_-]+; grouping ( ); postfix * + ? {m} {m,} {m,n}; `#` comments. A rule ends where the
// next `name ::=` begins. Errors name the offset and the problem.
#pragma once

#include <string_view>

#include "core/status.h"
#include "text/grammar/grammar.h"

namespace moert::grammar {

// Parses GBNF into `builder` (rules named as written) and returns the id of `root`.
Result<int> parse_gbnf(std::string_view text, GrammarBuilder& builder);
// parse_gbnf + build.
Result<Grammar> compile_gbnf(std::string_view text);

}  // namespace moert::grammar
