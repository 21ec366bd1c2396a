// libFuzzer target: the structured-output parsers (docs/structured-output.md). The first byte picks
// the constraint kind (JSON schema, regex, GBNF, guided_choice, json_object), the rest is its text;
// what compiles is run as an automaton over the text's own bytes, with each state's horizon key
// (the mask cache's class). Bad input must come back as a Status, never a crash, hang or
// unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/grammar/automaton.h"
#include "text/grammar/constraint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* kKinds[] = {"json_schema", "regex", "grammar", "choice", "json_object"};
  const std::string kind = kKinds[data[0] % 5];
  const std::string spec(reinterpret_cast<const char*>(data + 1), size - 1);
  moert::Result<moert::grammar::Grammar> grammar = moert::grammar::compile_constraint(kind, spec);
  if (!grammar.is_ok()) return 0;
  moert::grammar::Automaton automaton(std::move(grammar).value());
  int32_t state = automaton.initial();
  std::vector<int32_t> key;
  for (size_t i = 0; i < spec.size() && i < 256 && state != moert::grammar::Automaton::kDead; ++i) {
    automaton.horizon_key(state, 16, &key);
    state = automaton.advance(state, static_cast<uint8_t>(spec[i]));
  }
  return 0;
}
