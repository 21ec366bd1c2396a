// JSON Schema -> grammar (docs/structured-output.md §JSON Schema): the subset xgrammar and
// OpenAI's strict mode support. Every keyword is either enforced exactly, ignored because it is
// an annotation (title, description, default, examples, $comment, $schema, $id, deprecated,
// readOnly, writeOnly), or refused by name with its location ("unsupported JSON Schema keyword
// 'not' at #/properties/a"). Nothing is silently dropped.
//
// The grammar generates a subset of the schema's valid instances (compact forms: properties in
// the order `properties` lists them, no properties beyond those listed, numbers without
// redundant forms: bounded numbers have no exponent and no trailing zero in their fraction);
// every string it accepts validates against the schema.
//
// Whitespace: between JSON tokens at most `max_whitespace` bytes of [ \t\n] (default 4), so a
// model cannot stall in whitespace; none before the value or after it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/grammar/grammar.h"

namespace moert::grammar {

struct JsonGrammarOptions {
  int max_whitespace = 4;  // bytes of [ \t\n] allowed between two JSON tokens
};

// The grammar of the schema's instances. Errors name the keyword and its JSON pointer.
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options = {});
// Any JSON object (response_format {"type": "json_object"}).
Result<Grammar> compile_json_object(const JsonGrammarOptions& options = {});
// Exactly one of `choices` (guided_choice), as raw text.
Result<Grammar> compile_choice(const std::vector<std::string>& choices);

// The regex (RegexTarget::kJsonString) that the grammar uses for a string `format`, or an empty
// string for a format moert does not support.
std::string json_format_regex(const std::string& format);

}  // namespace moert::grammar
