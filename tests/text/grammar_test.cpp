// The grammar module (docs/structured-output.md): schema, regex and GBNF compilers against the
// verdicts of npm ajv + ajv-formats and JavaScript RegExp (tests/data/grammar/oracle.json, made by
// tests/text/make_grammar_oracle.js), integer ranges exhaustively, UTF-8 ranges, refusals by name.
#include <fstream>
#include <optional>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/grammar/automaton.h"
#include "text/grammar/constraint.h"
#include "text/grammar/gbnf.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/number_range.h"
#include "text/grammar/regex.h"

namespace moert::grammar {
namespace {

nlohmann::ordered_json oracle() {
  std::ifstream in(std::string(MOERT_GRAMMAR_DATA_DIR) + "/oracle.json");
  EXPECT_TRUE(in.good());
  return nlohmann::ordered_json::parse(in);
}

// Every string the schema's grammar accepts is valid for ajv; every string marked `accept` is
// accepted (and ajv-valid: the generator checked).
TEST(GrammarOracle, JsonSchemasAgreeWithAjv) {
  const auto data = oracle();
  ASSERT_GE(data["schemas"].size(), 25u);
  for (const auto& entry : data["schemas"]) {
    const std::string name = entry["name"];
    Result<Grammar> grammar = compile_json_schema(entry["schema"]);
    ASSERT_TRUE(grammar.is_ok()) << name << ": " << grammar.status().message();
    Automaton automaton(std::move(grammar).value());
    int accepted = 0;
    for (const auto& c : entry["cases"]) {
      const std::string text = c["text"];
      const bool matches = automaton.matches(text);
      accepted += matches;
      if (matches) {
        EXPECT_TRUE(c["valid"].get<bool>()) << name << ": grammar accepts " << text << ", ajv rejects it";
      }
      if (c["accept"].get<bool>()) {
        EXPECT_TRUE(matches) << name << ": grammar rejects " << text;
      }
    }
    EXPECT_GT(accepted, 0) << name;
  }
}

TEST(GrammarOracle, RegexesMatchLikeJavaScript) {
  const auto data = oracle();
  for (const auto& entry : data["regexes"]) {
    const std::string pattern = entry["pattern"];
    Result<Grammar> grammar = compile_regex_grammar(pattern);
    ASSERT_TRUE(grammar.is_ok()) << pattern << ": " << grammar.status().message();
    Automaton automaton(std::move(grammar).value());
    for (const auto& c : entry["cases"]) {
      const std::string text = c["text"];
      EXPECT_EQ(automaton.matches(text), c["match"].get<bool>()) << pattern << " on " << nlohmann::json(text).dump();
    }
  }
}

TEST(GrammarIntegerRange, EveryIntegerNearTheBoundsExactly) {
  const std::vector<std::optional<int64_t>> bounds = {std::nullopt, -1000, -101, -100, -99, -10, -9, -1, 0, 1, 9, 10, 37, 99, 100, 101, 230, 999, 1000};
  for (const auto& lo : bounds) {
    for (const auto& hi : bounds) {
      if (lo && hi && *lo > *hi) continue;
      GrammarBuilder builder;
      const int root = builder.rule("root");
      ASSERT_TRUE(builder.define(root, integer_range_expr(lo, hi)).is_ok());
      Result<Grammar> g = builder.build(root);
      ASSERT_TRUE(g.is_ok());
      Automaton automaton(std::move(g).value());
      for (int64_t v = -1200; v <= 1200; ++v) {
        const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
        ASSERT_EQ(automaton.matches(std::to_string(v)), in)
            << v << " in [" << (lo ? std::to_string(*lo) : "-inf") << ", " << (hi ? std::to_string(*hi) : "inf") << "]";
      }
      for (const char* bad : {"-0", "00", "01", "-01", "", "-", "+1"}) EXPECT_FALSE(automaton.matches(bad)) << bad;
    }
  }
}

TEST(GrammarUtf8, CodepointRangesAcceptExactlyTheirEncodings) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::uniform_int_distribution<uint32_t> cp(0, 0x10FFFF);
    uint32_t a = cp(rng), b = cp(rng);
    if (trial % 3 == 0) b = a + (cp(rng) % 3000);
    if (a > b) std::swap(a, b);
    b = std::min<uint32_t>(b, 0x10FFFF);
    GrammarBuilder builder;
    const int root = builder.rule("root");
    ASSERT_TRUE(builder.define(root, codepoint_ranges({{a, b}})).is_ok());
    Automaton automaton(builder.build(root).value());
    for (int probe = 0; probe < 400; ++probe) {
      uint32_t v = probe < 6 ? std::vector<uint32_t>{a, b, a - 1, b + 1, 0xD7FF, 0xE000}[static_cast<size_t>(probe)] : cp(rng);
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) continue;
      EXPECT_EQ(automaton.matches(utf8_encode(v)), v >= a && v <= b) << std::hex << v << " in [" << a << ", " << b << "]";
    }
    EXPECT_FALSE(automaton.matches("\xED\xA0\x80"));  // an encoded surrogate
    EXPECT_FALSE(automaton.matches("\xC0\x80"));      // overlong
  }
}

TEST(GrammarJson, WhitespaceIsBounded) {
  Automaton automaton(compile_json_object({.max_whitespace = 4}).value());
  EXPECT_TRUE(automaton.matches("{    }"));
  EXPECT_FALSE(automaton.matches("{     }"));
  EXPECT_TRUE(automaton.matches("{\n  \"a\": [1, {\"b\": null}]\n}"));
  EXPECT_FALSE(automaton.matches("[1]"));
  EXPECT_FALSE(automaton.matches(" {}"));
  Automaton tight(compile_json_object({.max_whitespace = 0}).value());
  EXPECT_TRUE(tight.matches("{\"a\":1}"));
  EXPECT_FALSE(tight.matches("{\"a\": 1}"));
}

// Numbers with whole-number bounds: every accepted string lies within the bounds (inclusive or
// exclusive), and every in-range number in compact form (no exponent, a fraction that does not
// end in 0) is accepted; integers, decimals and "-0.x" near each bound.
TEST(GrammarJson, NumberBoundsAcceptExactlyTheCompactNumbersInRange) {
  struct Bounds {
    std::optional<int64_t> min, xmin, max, xmax;
  };
  const std::vector<Bounds> cases = {{0, {}, 1, {}},  {{}, 0, {}, 1},  {-3, {}, {}, 2},    {{}, -3, 2, {}}, {{}, {}, 0, {}},
                                     {{}, {}, {}, -2}, {5, {}, {}, {}}, {{}, -1, {}, {}}, {-10, {}, -10, {}}, {{}, 0, {}, {}}};
  std::vector<std::string> texts;
  for (int k = 0; k <= 12; ++k) {
    for (const std::string sign : {"", "-"}) {
      texts.push_back(sign + std::to_string(k));
      for (const char* f : {"5", "25", "05", "999", "001", "0", "50"}) texts.push_back(sign + std::to_string(k) + "." + f);
    }
  }
  for (const Bounds& b : cases) {
    nlohmann::ordered_json schema = {{"type", "number"}};
    if (b.min) schema["minimum"] = *b.min;
    if (b.xmin) schema["exclusiveMinimum"] = *b.xmin;
    if (b.max) schema["maximum"] = *b.max;
    if (b.xmax) schema["exclusiveMaximum"] = *b.xmax;
    Result<Grammar> g = compile_json_schema(schema);
    ASSERT_TRUE(g.is_ok()) << schema.dump() << ": " << g.status().to_string();
    Automaton automaton(std::move(g).value());
    int accepted = 0;
    for (const std::string& text : texts) {
      const double v = std::stod(text);
      const bool in = (!b.min || v >= *b.min) && (!b.xmin || v > *b.xmin) && (!b.max || v <= *b.max) && (!b.xmax || v < *b.xmax);
      const size_t dot = text.find('.');
      const bool compact = text != "-0" && (dot == std::string::npos || text.back() != '0');
      const bool matches = automaton.matches(text);
      accepted += matches;
      if (matches) EXPECT_TRUE(in) << schema.dump() << " accepts " << text;
      if (in && compact) EXPECT_TRUE(matches) << schema.dump() << " rejects " << text;
    }
    EXPECT_GT(accepted, 0) << schema.dump();
  }
}

// Unsupported schemas are refused by name, with the location.
TEST(GrammarJson, UnsupportedKeywordsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"not": {"type": "string"}})", "unsupported JSON Schema keyword 'not' at #"},
      {R"({"type": "object", "properties": {"a": {"allOf": [{}]}}})", "'allOf' at #/properties/a"},
      {R"({"type": "string", "format": "hostname"})", "string format 'hostname'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' true"},
      {R"({"type": "number", "minimum": 0.5})", "'minimum' = 0.5 on type number (only whole-number bounds)"},
      {R"({"type": "number", "exclusiveMinimum": 2, "maximum": 2})", "number bounds that no number satisfies"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})", "'oneOf' whose branches may overlap"},
      {R"({"$ref": "http://example.com/s.json"})", "only local"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "backreferences"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
      {R"({"type": "integer", "multipleOf": 2})", "'multipleOf'"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})", "'minLength' above 'maxLength'"},
      {R"(false)", "the schema false"},
      {R"({"type": "strng"})", "\"strng\" at # is not a JSON Schema type"},
      {R"({"$ref": "#/$defs/missing"})", "points at nothing"},
  };
  for (const auto& [schema, message] : cases) {
    Result<Grammar> g = compile_constraint("json_schema", schema);
    ASSERT_FALSE(g.is_ok()) << schema;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << schema << " -> " << g.status().message();
  }
}

TEST(GrammarGbnf, ParsesAndMatches) {
  const char* text = R"(
    # a tiny key=value list
    root ::= pair ("," pair)*
    pair ::= key "=" val
    key  ::= [a-z_]+
    val  ::= [0-9]{1,3} | "\"" [^"\n]* "\"" | "é"
  )";
  Result<Grammar> g = compile_gbnf(text);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  Automaton automaton(std::move(g).value());
  for (const char* ok : {"a=1", "a_b=123,c=\"x y\"", "k=é", "k=\"\""}) EXPECT_TRUE(automaton.matches(ok)) << ok;
  for (const char* bad : {"", "a=1234", "A=1", "a=1,", "a=\"\n\"", "k=e"}) EXPECT_FALSE(automaton.matches(bad)) << bad;
}

TEST(GrammarGbnf, ErrorsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "grammar is empty"},
      {"root ::= a", "rule 'a' is used but never defined"},
      {"root ::= root \"x\" | \"y\"", "rule 'root' is left-recursive"},
      {"root ::= (\"a\"?)*", "left-recursive"},
      {"root ::= \"abc", "unterminated string"},
      {"root ::= [a-", "unterminated character class"},
      {"x ::= \"a\"", "no 'root' rule"},
      {"root ::= \"a\"{3,1}", "max < min"},
      {"root ::= \"a\" \nroot ::= \"b\"", "defined twice"},
      {"root := \"a\"", "expected '::='"},
  };
  for (const auto& [grammar, message] : cases) {
    Result<Grammar> g = compile_gbnf(grammar);
    ASSERT_FALSE(g.is_ok()) << grammar;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << grammar << " -> " << g.status().message();
  }
}

TEST(GrammarChoice, OneOfTheChoices) {
  Automaton automaton(compile_constraint("choice", R"(["yes", "no", "yes please"])").value());
  EXPECT_TRUE(automaton.matches("yes"));
  EXPECT_TRUE(automaton.matches("yes please"));
  EXPECT_FALSE(automaton.matches("ye"));
  EXPECT_FALSE(automaton.matches("no "));
  EXPECT_FALSE(compile_constraint("choice", "[]").is_ok());
  EXPECT_FALSE(compile_constraint("choice", "[1]").is_ok());
}

// Property order follows `properties` as written (ordered JSON), not alphabetical.
TEST(GrammarJson, PropertiesInSchemaOrder) {
  Automaton automaton(compile_constraint("json_schema", R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"],"additionalProperties":false})").value());
  EXPECT_TRUE(automaton.matches(R"({"z":1,"a":2})"));
  EXPECT_FALSE(automaton.matches(R"({"a":2,"z":1})"));
}

// A schema with 50 properties compiles to a grammar whose automaton accepts a full instance.
TEST(GrammarJson, FiftyProperties) {
  nlohmann::ordered_json schema = {{"type", "object"}, {"additionalProperties", false}};
  std::string instance = "{";
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    schema["properties"][name] = i % 2 ? nlohmann::ordered_json{{"type", "integer"}} : nlohmann::ordered_json{{"type", "string"}};
    schema["required"].push_back(name);
    instance += (i ? "," : "") + nlohmann::json(name).dump() + ":" + (i % 2 ? "7" : "\"v\"");
  }
  instance += "}";
  Automaton automaton(compile_json_schema(schema).value());
  EXPECT_TRUE(automaton.matches(instance));
}

}  // namespace
}  // namespace moert::grammar
