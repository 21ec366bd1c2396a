#include "text/grammar/constraint.h"

#include "text/grammar/gbnf.h"
#include "text/grammar/regex.h"

namespace moert::grammar {

Result<Grammar> compile_constraint(const std::string& kind, const std::string& spec, const JsonGrammarOptions& options) {
  if (kind == "json_object") return compile_json_object(options);
  if (kind == "regex") return compile_regex_grammar(spec);
  if (kind == "grammar") return compile_gbnf(spec);
  if (kind == "json_schema" || kind == "choice") {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("the " + kind + " is not valid JSON");
    if (kind == "json_schema") return compile_json_schema(j, options);
    if (!j.is_array()) return invalid_argument("'guided_choice' must be a list of strings");
    std::vector<std::string> choices;
    for (const auto& c : j) {
      if (!c.is_string()) return invalid_argument("'guided_choice' must be a list of strings, got " + c.dump());
      choices.push_back(c.get<std::string>());
    }
    return compile_choice(choices);
  }
  return invalid_argument("unknown constraint kind '" + kind + "'");
}

}  // namespace moert::grammar
