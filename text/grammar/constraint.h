// A request's output constraint (docs/structured-output.md) from its plain description: the
// kind and the text the request line gave.
//   json_object  any JSON object (spec unused)
//   json_schema  spec = the schema as JSON text
//   regex        spec = an ECMAScript regex; the output is a full match
//   grammar      spec = GBNF (gbnf.h)
//   choice       spec = a JSON array of strings; the output is one of them
#pragma once

#include <string>

#include "core/status.h"
#include "text/grammar/json_schema.h"

namespace moert::grammar {

// The grammar of a constraint; errors name the problem ("unsupported JSON Schema keyword 'not'
// at #/properties/a").
Result<Grammar> compile_constraint(const std::string& kind, const std::string& spec, const JsonGrammarOptions& options = {});

}  // namespace moert::grammar
