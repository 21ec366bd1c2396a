// Chat templates (docs/chat_template.md): every line of tests/data/chat_templates/<name>.oracle.jsonl
// (made by @huggingface/jinja, tests/text/make_chat_template_oracle.js) renders byte-identical or
// fails the same way; then the semantics one by one, the deliberate differences from the oracle,
// syntax errors, limits, and loading a checkpoint's template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "text/chat_template/chat_template.h"

namespace moert::text {
namespace {

using OJson = nlohmann::ordered_json;

std::filesystem::path data_dir() { return MOERT_CHAT_TEMPLATE_DATA_DIR; }
std::filesystem::path tokenizer_data_dir() { return MOERT_TOKENIZER_DATA_DIR; }

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

CivilTime fixed_time() { return CivilTime{2025, 3, 7, 14, 5, 9}; }

// Renders `source` with `context` (JSON text) at the fixed time.
std::string render(const std::string& source, const std::string& context = "{}") {
  RenderOptions options;
  options.now = fixed_time();
  return ChatTemplate::parse(source).render(OJson::parse(context), options);
}

// The error `source` raises when rendered with `context`.
ChatTemplateError render_error(const std::string& source, const std::string& context = "{}",
                               RenderOptions options = {}) {
  options.now = fixed_time();
  try {
    const std::string out = ChatTemplate::parse(source).render(OJson::parse(context), options);
    ADD_FAILURE() << "no error for " << source << "; rendered \"" << out << "\"";
  } catch (const ChatTemplateError& e) {
    return e;
  }
  return ChatTemplateError(ChatTemplateError::Kind::kRuntime, 0, 0, "none");
}

ChatTemplateError parse_error(const std::string& source) {
  try {
    ChatTemplate::parse(source);
    ADD_FAILURE() << "no syntax error for " << source;
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kSyntax) << e.what();
    return e;
  }
  return ChatTemplateError(ChatTemplateError::Kind::kSyntax, 0, 0, "none");
}

// ---- Oracle ----------------------------------------------------------------------------------
struct OracleCase {
  size_t line = 0;
  std::string id;
  OJson context;
  CivilTime now;
  bool has_output = false;
  std::string output;
  std::string error;
  bool raised = false;
};

std::vector<OracleCase> read_oracle(const std::string& name) {
  std::ifstream in(data_dir() / (name + ".oracle.jsonl"));
  EXPECT_TRUE(in.good()) << "cannot open the oracle of " << name;
  std::vector<OracleCase> cases;
  std::string text;
  for (size_t number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    const OJson json = OJson::parse(text);
    OracleCase c;
    c.line = number;
    c.id = json.at("case").get<std::string>();
    c.context = json.at("context");
    const auto& now = json.at("now");
    c.now = CivilTime{now[0].get<int>(), now[1].get<int>(), now[2].get<int>(),
                      now[3].get<int>(), now[4].get<int>(), now[5].get<int>()};
    c.has_output = json.contains("output");
    if (c.has_output) {
      c.output = json.at("output").get<std::string>();
    } else {
      c.error = json.at("error").get<std::string>();
      c.raised = json.at("raised").get<bool>();
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// The first difference of two strings, for failure messages.
std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "at byte " + std::to_string(i) + ": expected ..." + OJson(expected.substr(from, 100)).dump() +
         "\n   actual ..." + OJson(actual.substr(from, 100)).dump();
}

class ChatTemplateOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateOracleTest, MatchesHuggingFaceJinja) {
  const std::string name = GetParam();
  const ChatTemplate chat_template = ChatTemplate::parse(read_file(data_dir() / (name + ".jinja")));
  const std::vector<OracleCase> cases = read_oracle(name);
  EXPECT_GE(cases.size(), 30u) << name;
  size_t checked = 0;
  for (const OracleCase& c : cases) {
    SCOPED_TRACE(name + ".oracle.jsonl line " + std::to_string(c.line) + " (" + c.id + ")");
    RenderOptions options;
    options.now = c.now;
    options.max_steps = 100000;  // real conversations need far less than the default budget
    try {
      const std::string out = chat_template.render(c.context, options);
      if (c.has_output) {
        EXPECT_TRUE(out == c.output) << first_difference(c.output, out);
      } else {
        ADD_FAILURE() << "expected the error \"" << c.error << "\", rendered " << OJson(out).dump();
      }
    } catch (const ChatTemplateError& e) {
      if (c.has_output) {
        ADD_FAILURE() << "unexpected error: " << e.what();
      } else if (c.raised) {
        EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kRaised) << e.what();
        EXPECT_EQ(e.detail(), c.error);
        EXPECT_NE(std::string(e.what()).find(c.error), std::string::npos);
      } else {
        EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kRuntime) << e.what() << " (oracle: " << c.error << ")";
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateOracleTest,
                         ::testing::Values("qwen3", "deepseek_v3", "gpt_oss", "llama3", "llama3_1", "llama3_2",
                                           "mistral_nemo"),
                         [](const auto& info) { return info.param; });


// ---- Semantics, case by case ------------------------------------------------------------------
// Expected values are what @huggingface/jinja renders (checked with it), except in the
// "Differences" tests further down.
struct Case {
  const char* name;
  const char* source;
  const char* context;
  const char* expected;
};

void expect_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      EXPECT_EQ(render(c.source, c.context), c.expected);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "error: " << e.what();
    }
  }
}

TEST(ChatTemplateSemantics, WhitespaceControl) {
  expect_cases({
      {"text", "Hello\n", "{}", "Hello"},  // one trailing newline of the source is dropped
      {"two newlines", "a\n\n", "{}", "a\n"},
      {"{%- strips before", "a  \n  {%- if true %}b{% endif %}", "{}", "ab"},
      {"-%} strips after", "{% if true -%}  \n  b{% endif %}", "{}", "b"},
      {"{{- -}}", "a  {{- 'x' -}}  b", "{}", "axb"},
      {"trim_blocks", "{% if true %}\nX\n{% endif %}\nY", "{}", "X\nY"},
      {"lstrip_blocks not for {{", "  {% if true %}X{% endif %}|  {{ 'y' }}", "{}", "X|  y"},
      {"lstrip tabs and comments", "\t {% set x = 1 %}a\n    {# c #}\nb", "{}", "a\nb"},
      {"comments", "a{# hi #}b{#- x -#}  c", "{}", "abc"},
      {"generation tags", "a {% generation %}b{% endgeneration %} c", "{}", "a b c"},
      {"generation tags strip", "a {%- generation -%} b", "{}", "ab"},
      {"raw", "{% raw %}{{ not rendered }}{% endraw %}x", "{}", "{{ not rendered }}x"},
      {"raw strip", "a {%- raw -%}  {{ x }}  {%- endraw -%} b", "{}", "a{{ x }}b"},
      {"unicode spaces", "a\xc2\xa0\xe3\x80\x80{{- 'b' }}", "{}", "ab"},
  });
}

TEST(ChatTemplateSemantics, Literals) {
  expect_cases({
      {"strings", R"({{ 'a\tb' ~ "c\"d" ~ '\u00e9\x41' ~ 'x' 'y' }})", "{}", "a\tbc\"d\xc3\xa9" "Axy"},
      {"surrogate pair", R"({{ '\ud83d\ude42' }})", "{}", "\xf0\x9f\x99\x82"},
      {"ints", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 6 / 2 }}",
       "{}", "3 -4 1 -1 1024 64 3.5 3.0"},
      {"floats",
       "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1.0 }} {{ 2.5 * 2 }} {{ 3.25 }} {{ 100000000000000000000.0 }} "
       "{{ 0.00000015 }} {{ -0.0 }} {{ 1.5 / 0.5 }} {{ 2 ** -1 }}",
       "{}", "2.5 0.30000000000000004 1.0 5.0 3.25 100000000000000000000.0 1.5e-7 -0.0 3.0 0.5"},
      {"precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }}", "{}", "7 9 4 5"},
      {"constants", "{{ true }}{{ True }}{{ false }}{{ False }}[{{ none }}][{{ None }}]", "{}", "truetruefalsefalse[][]"},
      {"lists and dicts", "{{ [1, 'a', none, true] }}|{{ {'a': 1, 'b': [2]} }}|{{ [] }}|{{ {} }}", "{}",
       R"([1, "a", null, true]|{"a": 1, "b": [2]}|[]|{})"},
      {"tuples", "{% set t = (1, 'b') %}{{ t[1] }}{{ t|length }}{{ t is sequence }}{{ t is iterable }}", "{}", "b2truefalse"},
  });
}

TEST(ChatTemplateSemantics, Operators) {
  expect_cases({
      {"concat", "{{ 'a' ~ 1 ~ true ~ [1,'b'] ~ 1.5 }}|{{ 'n=' + 5 }}|{{ 'x' ~ undefined_var ~ 'y' }}|{{ [1] + [2] }}",
       "{}", "a1true1,b1.5|n=5|xy|[1, 2]"},
      {"none inside a joined list", "{{ [1, none, {'a': 2}] ~ '' }}", "{}", "1,undefined,{\"a\": 2}"},
      {"comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ 'a' != 'b' }} {{ true == 1 }}",
       "{}", "true true false true true true true"},
      {"logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not '' }} {{ '' or [] or 0 }}|{{ none or 'z' }}", "{}",
       "x y true 0|z"},
      {"not binds loosely", "{{ not 1 == 2 }}{{ not (true and false) }}", "{}", "truetrue"},
      {"membership",
       "{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in ['a'] }} {{ 'q' in undefined_var }}", "{}",
       "true true true true false"},
      {"ternary", "{{ 'a' if true else 'b' }}{{ 'c' if false else 'd' if true else 'e' }}[{{ 'f' if false }}]", "{}",
       "ad[]"},
  });
}

TEST(ChatTemplateSemantics, Tests) {
  expect_cases({
      {"is",
       "{{ none is none }} {{ 1 is number }} {{ 1.5 is integer }} {{ 'x' is string }} {{ {} is mapping }} "
       "{{ [] is iterable }} {{ 'x' is iterable }} {{ x is defined }} {{ x is undefined }} {{ true is boolean }} "
       "{{ 3 is odd }} {{ 4 is even }} {{ true is true }} {{ 0 is false }} {{ (1,2) is sequence }} "
       "{{ 'ABC' is upper }} {{ 'abc' is lower }} {{ none is not none }} {{ range is callable }}",
       "{}", "true true false true true true true false true true true true true false true true true false true"},
      {"tests with arguments (extension)", "{{ 6 is divisibleby(3) }}{{ 2 is eq(2) }}{{ 1 is ne(2) }}{{ 2 is in([1,2]) }}",
       "{}", "truetruetruetrue"},
  });
}

TEST(ChatTemplateSemantics, MembersAndSlices) {
  expect_cases({
      {"members",
       "{{ d.a }} {{ d['b'] }} {{ d.c.x }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ 'abc'[1] }} {{ 'abc'[-1] }} "
       "{{ l|length }} {{ l.length }} {{ 'h\xc3\xa9llo'.length }} [{{ d.missing }}] [{{ l[7] }}]",
       R"({"d": {"a": 1, "b": 2, "c": {"x": 3}}, "l": [10, 20, 30]})", "1 2 3 10 30 20 b c 3 3 5 [] []"},
      {"slices",
       "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ l[1:-1] }} {{ 'hello'[1:4] }} "
       "{{ 'hello'[::-1] }} {{ l[5:] }} {{ l[:-10] }} {{ l[::0] }}",
       R"({"l": [1, 2, 3, 4, 5]})", "[2, 3, 4, 5] [1, 2] [5, 4, 3, 2, 1] [4, 5] [1, 3, 5] [2, 3, 4] ell olleh [] [] []"},
      {"unicode slices", "{{ '\xe4\xbd\xa0\xe5\xa5\xbd\xf0\x9f\x99\x82'[1:] }}|{{ '\xf0\x9f\x99\x82x'[0] }}", "{}",
       "\xe5\xa5\xbd\xf0\x9f\x99\x82|\xf0\x9f\x99\x82"},
      {"none attribute", "[{{ n.foo }}]{{ n.foo is defined }}", R"({"n": null})", "[]false"},
  });
}

TEST(ChatTemplateSemantics, Methods) {
  expect_cases({
      {"strings",
       R"({{ ' Hi '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|)"
       R"({{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x','c')) }}|{{ 'aaa'.replace('a','b',2) }}|)"
       R"({{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }})",
       "{}", R"(Hi|["a", "b", "", "c"]|["a", "b"]|["a", "b c"]|true|true|bba|ABC|abc|Hello World|Hello)"},
      {"split edge cases", "{{ '  a b  c '.split(none, 1) }}{{ 'a,b,c'.split(',', 0) }}{{ ''.split() }}{{ 'x'.replace('', '-') }}",
       "{}", R"(["a", "b  c "]["a,b,c"][]-x-)"},
      {"title like the oracle", "{{ '\xc3\xa9lan vital-x'|title }}{{ 'hello   world'.title() }}", "{}",
       "\xc3\xa9Lan Vital-XHello   World"},
      {"dicts",
       "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys() }}|{{ d.values() }}|{{ d.get('a') }}|"
       "{{ d.get('z', 'dflt') }}|{{ d.get('z') is none }}",
       R"({"d": {"b": 2, "a": 1}})", R"(b=2;a=1;|["b", "a"]|[2, 1]|1|dflt|true)"},
  });
}

TEST(ChatTemplateSemantics, Filters) {
  expect_cases({
      {"basic",
       "{{ '  x  '|trim }}|{{ [1,2,3]|length }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ ['a','b']|join(', ') }}|"
       "{{ [1,2]|first }}|{{ [1,2]|last }}|{{ x|default('d') }}|{{ ''|default('e', true) }}|{{ 5|string }}|"
       "{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ 3.7|int }}|{{ [3,1,2]|sort }}|{{ [1,2,1,3]|unique }}|{{ [1,2]|reverse }}|"
       "{{ 'hello world'|title }}|{{ 'hello'|capitalize }}|{{ 'a-b'|replace('-', '+') }}|{{ -3|abs }}|{{ '1.5'|float }}",
       "{}", "x|3|AB|ab|a, b|1|2|d|e|5|43|0|3|[1, 2, 3]|[1, 2, 3]|[2, 1]|Hello World|Hello|a+b|3|1.5"},
      {"objects",
       "{{ items|map(attribute='n')|join(',') }}|{{ items|selectattr('ok')|length }}|"
       "{{ items|rejectattr('ok')|map(attribute='n')|list }}|{{ items|selectattr('s', 'equalto', 'b')|first }}|"
       "{{ d|items }}|{{ d|dictsort }}|{{ d|length }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|"
       "{{ 'x'|safe }}|{{ items|map(attribute='zz', default='-')|join }}",
       R"({"items": [{"n": 1, "ok": true, "s": "a"}, {"n": 2, "ok": false, "s": "b"}, {"n": 3, "ok": true, "s": "c"}],
           "d": {"b": 2, "A": 1}})",
       "1,2,3|2|[2]|{\"n\": 2, \"ok\": false, \"s\": \"b\"}|[[\"b\", 2], [\"A\", 1]]|[[\"A\", 1], [\"b\", 2]]|2|"
       "a\n  b\n\n  c|  a\n  b|x|---"},
      {"sorting",
       "{{ l|sort(attribute='k')|map(attribute='k')|join }}{{ ['b','A','c']|sort|join }}"
       "{{ [3,1,2]|sort(reverse=true)|join }}{{ d|dictsort(by='value', reverse=true) }}",
       R"({"l": [{"k": "b"}, {"k": "a"}], "d": {"x": 2, "y": 3, "z": 1}})", R"(abAbc321[["y", 3], ["x", 2], ["z", 1]])"},
      {"join and numbers", "{{ 'abc'|join('-') }}{{ [1, none, 'x']|join('.') }}|{{ ' 12px'|int }}{{ '-3'|int }}"
       "{{ '2.5e1'|float }}{{ 'abc'|float }}{{ 'x'|int(7) }}{{ true|int }}",
       "{}", "a-b-c1..x|12-325.00.071"},
      {"select and reject (extension)",
       "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}"
       "{{ ['a','code','b']|reject('equalto','code')|join(',') }}",
       "{}", "[1, 3][1, 3]a,b"},
      {"filter block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", "{}", "ABCD"},
  });
}

TEST(ChatTemplateSemantics, ToJson) {
  expect_cases({
      {"formats",
       "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ [] |tojson(indent=2) }}|{{ {'a': []}|tojson(indent=2) }}|"
       "{{ '\xc3\xa9\"\\n\\u0001'|tojson }}|{{ '\xc3\xa9'|tojson(ensure_ascii=true) }}|"
       "{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|{{ [1,2]|tojson(separators=(',', ':')) }}",
       R"({"v": {"z": 1, "a": [true, null, 1.5, "s"], "m": {}}})",
       "{\"z\": 1, \"a\": [true, null, 1.5, \"s\"], \"m\": {}}|"
       "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    1.5,\n    \"s\"\n  ],\n  \"m\": {}\n}|[]|{\n  \"a\": []\n}|"
       "\"\xc3\xa9\\\"\\n\\u0001\"|\"\\u00e9\"|{\"a\": 2, \"b\": 1}|[1,2]"},
      {"astral and U+2028", "{{ 'a\\u2028b'|tojson }}{{ '\xf0\x9f\x99\x82'|tojson(ensure_ascii=true) }}"
       "{{ [1, [2, {'a': none}]]|tojson(indent=1) }}",
       "{}", "\"a\xe2\x80\xa8" "b\"\"\\ud83d\\ude42\"[\n 1,\n [\n  2,\n  {\n   \"a\": null\n  }\n ]\n]"},
      {"key order of the context", "{{ t|tojson }}", R"({"t": {"type": "function", "function": {"name": "f"}}})",
       R"({"type": "function", "function": {"name": "f"}})"},
  });
}

TEST(ChatTemplateSemantics, Loops) {
  expect_cases({
      {"loop variables",
       "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
       "{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
       R"({"l": ["a", "b"]})", "10truefalse221|21falsetrue210|"},
      {"previtem, else, if", "{% for x in l %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}"
       "{% for x in [] %}no{% else %}empty{% endfor %}{% for x in l if x != 'b' %}{{ x }}{{ loop.index }}{% endfor %}",
       R"({"l": ["a", "b", "c"]})", "-a-b;a-b-c;b-c-;emptya1c2"},
      {"dict keys and unpacking", "{% for k in d %}{{ k }}{% endfor %}{% for a, b in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}",
       R"({"d": {"x": 1, "y": 2}})", "xy37"},
      {"break and continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
       "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", "{}", "0134"},
      {"nested loops", "{% for a in [1,2] %}{% for b in ['x', 'y'] if false %}{% endfor %}"
       "{% for b in [1,2] %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", "{}", "121;122;"},
      {"range", "{{ range(3) }}{{ range(1, 4) }}{{ range(5, 0, -2) }}", "{}", "[0, 1, 2][1, 2, 3][5, 3, 1]"},
  });
}

TEST(ChatTemplateSemantics, SetNamespaceMacros) {
  expect_cases({
      {"scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"
       "{% if true %}{% set y = 3 %}{% endif %}{{ y }}", "{}", "213"},
      {"namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}"
       "{% endfor %}{{ ns.count }}{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}", "{}", "312"},
      {"block set and tuple set", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}",
       R"({"name": "Bob"})", "[Hello Bob!]12"},
      {"macro defaults and keywords", "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}"
       "{{ greet('A') }} {{ greet('B', 'Yo') }} {{ greet(name='C', greeting='Hey') }}", "{}", "Hi, A! Yo, B! Hey, C!"},
      {"recursive macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}"
       "{{ fact(5) }}", "{}", "120"},
      {"kwargs and varargs", "{% macro m(a) %}{{ a }}{{ kwargs }}{{ varargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", "{}",
       "1{\"x\": 4}[2, 3]"},
      {"call block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
       "{% call wrap('b') %}inner{% endcall %}", "{}", "<b>inner</b>"},
      {"macro sees later globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", "{}", "late"},
      {"spread arguments", "{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(*[1, 2]) }}{{ m(**{'b': 4, 'a': 3}) }}",
       "{}", "1234"},
  });
}

TEST(ChatTemplateSemantics, StrftimeNowUsesTheInjectedTime) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M %b %B %% %S') }}"), "2025-03-07 14:05 Mar March % %S");
  RenderOptions options;
  options.now = CivilTime{1999, 12, 31, 23, 59, 0};
  EXPECT_EQ(ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}").render(OJson::object(), options), "31 Dec 1999");
}

// ---- Deliberate differences from @huggingface/jinja (docs/chat_template.md, "Differences") ----
// Expected values are what Python's Jinja2 (transformers) renders.
TEST(ChatTemplateDifferences, UndefinedIsJinjasUndefined) {
  EXPECT_EQ(render("{% for a in x %}A{% else %}E{% endfor %}{{ x|length }}"), "E0");
  EXPECT_EQ(render("{{ x == none }}{{ x == y }}"), "falsetrue");
  const ChatTemplateError attribute = render_error("{{ x.y }}");
  EXPECT_EQ(attribute.kind(), ChatTemplateError::Kind::kRuntime);
  EXPECT_EQ(attribute.detail(), "'x' is undefined");
  EXPECT_EQ(render_error("{{ d.a.b }}", R"({"d": {}})").detail(), "'dict object' has no attribute 'a'");
  EXPECT_EQ(render_error("{{ messages[0].role }}", R"({"messages": []})").detail(), "list object has no element 0");
  EXPECT_EQ(render_error("{{ f() }}").detail(), "'f' is undefined");
  // The real Qwen3 template reads messages[0].role: an empty conversation fails, as in transformers.
  const std::string qwen3 = read_file(data_dir() / "qwen3.jinja");
  EXPECT_EQ(render_error(qwen3, R"({"messages": [], "add_generation_prompt": true})").detail(),
            "list object has no element 0");
}

TEST(ChatTemplateDifferences, PythonSemanticsWhereTheOracleDeviates) {
  expect_cases({
      {"strip(chars)", "[{{ '  x\\n'.strip('\\n') }}][{{ ' \\n y'.lstrip('\\n') }}][{{ 'xxhixx'.strip('x') }}]", "{}",
       "[  x][ \n y][hi]"},
      {"integral floats stay floats", "{{ f }}|{{ f|tojson }}|{{ f ~ '' }}", R"({"f": 3.0})", "3.0|3.0|3.0"},
      {"== compares containers by value", "{{ [1,2] == [1,2] }}{{ {'a':1} == {'a':1} }}{{ '1' == 1 }}", "{}",
       "truetruefalse"},
      {"selectattr with the undefined test", "{{ l|selectattr('t', 'undefined')|map(attribute='n')|list }}",
       R"({"l": [{"n": 1}, {"n": 2, "t": 1}]})", "[1]"},
      {"output before continue is kept", "{% for x in [1,2] %}a{{ x }}{% if x == 1 %}{% continue %}{% endif %}b{% endfor %}",
       "{}", "a1a2b"},
      {"tuples print", "{{ (1, 2) }}", "{}", "[1, 2]"},
      {"tuple unpacking in for", "{% for a, b in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}", "{}", "12"},
  });
  EXPECT_EQ(render_error("{{ 1 // 0 }}").detail(), "division by zero");
  EXPECT_EQ(render_error("{{ 1 / 0 }}").detail(), "division by zero");
  EXPECT_EQ(render_error("{{ 1 % 0 }}").detail(), "division by zero");
}

TEST(ChatTemplateDifferences, MistralChecksThatRolesAlternate) {
  // The oracle's selectattr("tool_calls", "undefined") selects nothing, so it never checks.
  const std::string mistral = read_file(data_dir() / "mistral_nemo.jinja");
  const ChatTemplateError e = render_error(
      mistral, R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "bos_token": "<s>",
                   "eos_token": "</s>", "tools": null})");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kRaised);
  EXPECT_EQ(e.detail(), "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplateDifferences, Llama31BuiltinToolsNeedTheRejectFilter) {
  const std::string llama = read_file(data_dir() / "llama3_1.jinja");
  const std::string out = render(llama, R"({"messages": [{"role": "user", "content": "Hi"}], "bos_token": "<b>",
      "builtin_tools": ["code_interpreter", "brave_search", "wolfram_alpha"], "add_generation_prompt": false})");
  EXPECT_EQ(out,
            "<b><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nTools: brave_search, wolfram_alpha\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

// ---- Errors ----------------------------------------------------------------------------------
TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessage) {
  const ChatTemplateError e = render_error("line one\n{{ raise_exception('bad ' ~ 1) }}");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kRaised);
  EXPECT_EQ(e.detail(), "bad 1");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("bad 1"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos);
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  struct SyntaxCase {
    const char* source;
    int line;
    int column;
    const char* part;
  };
  const std::vector<SyntaxCase> cases = {
      {"{% if x %}\nabc", 2, 4, "missing {% endif %} for the block opened at line 1, column 1"},
      {"ok\n  {{ x + }}", 2, 10, "expected an expression"},
      {"{% for x y %}{% endfor %}", 1, 10, "expected 'in'"},
      {"{{ 'unterminated }}", 1, 4, "unterminated string"},
      {"{% frobnicate %}", 1, 1, "unknown statement 'frobnicate'"},
      {"a\n\xc3\xa9\xc3\xa9 {{ x ! }}", 2, 9, "Unexpected character: !"},
      {"{{ x | 3 }}", 1, 8, "expected a filter name"},
      {"{{ 'a' 'b' ", 1, 12, "Unexpected end of input"},
      {"{# never closed", 1, 1, "Missing end of comment tag"},
      {"{% raw %}x", 1, 1, "missing {% endraw %}"},
      {"{{ x[] }}", 1, 6, "expected an index or a slice"},
      {"{% macro m(a, a) %}{% endmacro %}", 1, 15, "duplicate parameter name: a"},
      {"{{ f(a=1, 2) }}", 1, 11, "positional arguments must come before keyword arguments"},
      {"{{ 99999999999999999999 }}", 1, 4, "integer literal out of range"},
      {"{{ '\\q' }}", 1, 5, "Unexpected escaped character: q"},
  };
  for (const SyntaxCase& c : cases) {
    SCOPED_TRACE(c.source);
    const ChatTemplateError e = parse_error(c.source);
    EXPECT_EQ(e.line(), c.line) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    EXPECT_NE(e.detail().find(c.part), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line " + std::to_string(c.line) + ", column " + std::to_string(c.column)),
              std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheNode) {
  const ChatTemplateError e = render_error("abc\n  {{ 1|upper }}");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kRuntime);
  EXPECT_EQ(e.detail(), "Unknown NumericValue filter: upper");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 6);
  EXPECT_EQ(render_error("{% for a, b in [[1]] %}{% endfor %}").detail(), "Too few items to unpack");
  EXPECT_EQ(render_error("{{ 'x'() }}").detail(), "Cannot call something that is not a function: got StringValue");
  EXPECT_EQ(render_error("{% set d = {} %}{% set d.x = 1 %}").detail(), "cannot assign attribute on non-namespace object");
  EXPECT_EQ(render_error("{{ 'a' in none }}").detail(), "Cannot perform operation in on null values");
  EXPECT_EQ(render_error("{{ 'a'.startswith(1) }}").detail(), "startswith() argument must be a string or tuple of strings");
  EXPECT_EQ(render_error("{% break %}").detail(), "{% break %} outside a for loop");
  EXPECT_EQ(render_error("{{ x }}", "[1]").detail(), "the context must be a JSON object, got ArrayValue");
  EXPECT_EQ(render_error("{{ x }}", R"({"none": 1})").detail(),
            "the context variable 'none' would replace the built-in of that name");
  EXPECT_EQ(render_error("{{ range|tojson }}").detail(), "Cannot convert to JSON: FunctionValue");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}").detail(), "integer overflow in +");
}


// ---- Limits and malformed templates ----------------------------------------------------------
std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(ChatTemplateLimits, DeepNestingIsASyntaxError) {
  const std::vector<std::string> sources = {
      "{{ " + repeat("[", 20000) + repeat("]", 20000) + " }}",
      "{{ " + repeat("(", 20000) + "1" + repeat(")", 20000) + " }}",
      "{{ 1" + repeat(" + 1", 20000) + " }}",
      "{{ x" + repeat(".a", 20000) + " }}",
      "{{ x" + repeat("|trim", 20000) + " }}",
      "{{ f" + repeat("()", 20000) + " }}",
      "{{ " + repeat("not ", 20000) + "x }}",
      "{{ " + repeat("- ", 20000) + "1 }}",
      "{{ " + repeat("{'a': ", 20000) + "1" + repeat("}", 20000) + " }}",
      "{{ " + repeat("1 if x else ", 20000) + "2 }}",
      repeat("{% if x %}", 20000) + repeat("{% endif %}", 20000),
      repeat("{% for x in y %}", 20000) + repeat("{% endfor %}", 20000),
  };
  for (const std::string& source : sources) {
    SCOPED_TRACE(source.substr(0, 30));
    const ChatTemplateError e = parse_error(source);
    EXPECT_NE(e.detail().find("nested deeper than 256 levels"), std::string::npos) << e.what();
  }
  // Just below the limit is fine.
  EXPECT_EQ(render("{{ " + repeat("[", 100) + repeat("]", 100) + "|length }}"), "1");
  EXPECT_EQ(render("{{ 0" + repeat(" + 1", 200) + " }}"), "200");
}

TEST(ChatTemplateLimits, RuntimeLimits) {
  // Endless recursion stops at max_depth.
  ChatTemplateError e = render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kLimit);
  EXPECT_NE(e.detail().find("max_depth"), std::string::npos);
  // Output size.
  RenderOptions small;
  small.max_output_bytes = 1000;
  e = render_error("{% for i in range(1000) %}xx{% endfor %}", "{}", small);
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kLimit);
  EXPECT_NE(e.detail().find("max_output_bytes"), std::string::npos);
  // A string that doubles 40 times.
  e = render_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                   "{}", small);
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kLimit);
  EXPECT_NE(e.detail().find("max_output_bytes"), std::string::npos);
  // A list that doubles 40 times, a huge range, a long loop.
  e = render_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kLimit);
  EXPECT_NE(e.detail().find("max_steps"), std::string::npos);
  EXPECT_EQ(render_error("{{ range(1000000000000)|length }}").kind(), ChatTemplateError::Kind::kLimit);
  RenderOptions few_steps;
  few_steps.max_steps = 10000;
  EXPECT_EQ(render_error("{% for i in range(5000) %}{{ i }}{% endfor %}", "{}", few_steps).kind(),
            ChatTemplateError::Kind::kLimit);
  // replace() that would explode.
  small.max_output_bytes = 1 << 20;
  e = render_error("{{ ('x' ~ 'y' * 0)|replace('', 'abcdefgh')|replace('', 'abcdefgh')|replace('', 'abcdefgh') }}", "{}",
                   small);
  EXPECT_TRUE(e.kind() == ChatTemplateError::Kind::kLimit || e.kind() == ChatTemplateError::Kind::kRuntime) << e.what();
  // A namespace that contains itself cannot be printed.
  e = render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}");
  EXPECT_NE(e.detail().find("nested deeper"), std::string::npos) << e.what();
  // A context nested too deeply.
  std::string deep = "1";
  for (int i = 0; i < 600; ++i) deep = "[" + deep + "]";
  EXPECT_EQ(render_error("{{ x }}", "{\"x\": " + deep + "}").kind(), ChatTemplateError::Kind::kRuntime);
}

// Mutations of the real templates: parsing and rendering fail cleanly (ChatTemplateError) or
// succeed, never anything else.
TEST(ChatTemplateLimits, MalformedTemplatesFailCleanly) {
  const std::vector<std::string> names = {"qwen3", "deepseek_v3", "gpt_oss", "llama3_1", "llama3_2", "mistral_nemo"};
  const std::vector<std::string> fragments = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "{", "}",
                                              "'", "\"", "|", "if ", "for ", "endfor", "endif", "not ", "~", "**",
                                              "\\", ",", ":", ".", "=", " is ", "in ", "-%}", "{%-", "raw", "\xff"};
  uint64_t state = 12345;
  const auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  RenderOptions options;
  options.now = fixed_time();
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 20;
  int parsed = 0;
  int rendered = 0;
  for (const std::string& name : names) {
    const std::string original = read_file(data_dir() / (name + ".jinja"));
    const OJson context = read_oracle(name).front().context;
    for (int i = 0; i < 150; ++i) {
      std::string source = original;
      const int edits = 1 + static_cast<int>(next(3));
      for (int k = 0; k < edits; ++k) {
        const size_t pos = next(source.size() + 1);
        switch (next(4)) {
          case 0: source.resize(pos); break;
          case 1: source.erase(pos, next(20)); break;
          case 2: source.insert(pos, fragments[next(fragments.size())]); break;
          default: source.insert(pos, source.substr(next(source.size() + 1), next(40))); break;
        }
      }
      try {
        const ChatTemplate t = ChatTemplate::parse(source);
        ++parsed;
        try {
          t.render(context, options);
          ++rendered;
        } catch (const ChatTemplateError&) {
        }
      } catch (const ChatTemplateError& e) {
        EXPECT_EQ(e.kind(), ChatTemplateError::Kind::kSyntax);
        EXPECT_GE(e.line(), 1);
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rendered, 0);
}

// ---- API -------------------------------------------------------------------------------------
TEST(ChatTemplateApi, SortedJsonContextAndThreads) {
  const ChatTemplate t = ChatTemplate::parse("{{ d|tojson }}{% for m in messages %}{{ m.content }}{% endfor %}");
  // nlohmann::json sorts keys.
  EXPECT_EQ(t.render(nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}, "messages": []})")), R"({"a": 2, "b": 1})");
  EXPECT_EQ(t.source(), "{{ d|tojson }}{% for m in messages %}{{ m.content }}{% endfor %}");
  // One parsed template rendered from several threads at once.
  const std::string gpt = read_file(data_dir() / "gpt_oss.jinja");
  const ChatTemplate shared = ChatTemplate::parse(gpt);
  const std::vector<OracleCase> cases = read_oracle("gpt_oss");
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (const OracleCase& c : cases) {
        if (!c.has_output) continue;
        RenderOptions options;
        options.now = c.now;
        if (shared.render(c.context, options) != c.output) ++mismatches[static_cast<size_t>(k)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// The oracle case `id` of template `name`.
OracleCase oracle_case(const std::string& name, const std::string& id) {
  for (OracleCase& c : read_oracle(name)) {
    if (c.id == id) return c;
  }
  ADD_FAILURE() << "no case " << id << " in " << name;
  return {};
}

ChatRequest request_for(const OracleCase& c) {
  ChatRequest request;
  request.add_generation_prompt = c.context.value("add_generation_prompt", false);
  request.tools = c.context.value("tools", OJson());
  request.options.now = c.now;
  return request;
}

TEST(ChatTemplateApi, CheckpointTemplatesFromTokenizerConfig) {
  // Qwen3 and DeepSeek-V3: the template and the special tokens of the committed tokenizer_config.json
  // (DeepSeek's tokens are AddedToken objects).
  for (const auto& [name, id] : std::vector<std::pair<std::string, std::string>>{
           {"qwen3", "tool_flow"}, {"qwen3", "two_rounds"}, {"deepseek_v3", "two_tool_calls"}}) {
    SCOPED_TRACE(name + " " + id);
    const CheckpointChatTemplate chat = CheckpointChatTemplate::load(tokenizer_data_dir() / name);
    const OracleCase c = oracle_case(name, id);
    EXPECT_EQ(chat.apply(c.context.at("messages"), request_for(c)), c.output);
  }
  const CheckpointChatTemplate deepseek = CheckpointChatTemplate::load(tokenizer_data_dir() / "deepseek_v3");
  EXPECT_EQ(deepseek.special_tokens().at("bos_token"), "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  const CheckpointChatTemplate qwen3 = CheckpointChatTemplate::load(tokenizer_data_dir() / "qwen3");
  EXPECT_FALSE(qwen3.special_tokens().contains("bos_token"));  // null in the file
  EXPECT_EQ(qwen3.special_tokens().at("eos_token"), "<|im_end|>");
  EXPECT_TRUE(qwen3.special_tokens().at("additional_special_tokens").is_array());

  // gpt-oss keeps its template in chat_template.jinja, not in tokenizer_config.json.
  try {
    CheckpointChatTemplate::load(tokenizer_data_dir() / "gpt_oss");
    ADD_FAILURE() << "gpt_oss has no chat_template in tokenizer_config.json";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat_template"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("moert_chat_template_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(tokenizer_data_dir() / "gpt_oss" / "tokenizer_config.json", dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(data_dir() / "gpt_oss.jinja", dir / "chat_template.jinja",
                             std::filesystem::copy_options::overwrite_existing);
  const CheckpointChatTemplate gpt = CheckpointChatTemplate::load(dir);
  const OracleCase c = oracle_case("gpt_oss", "tool_flow");
  EXPECT_EQ(gpt.apply(c.context.at("messages"), request_for(c)), c.output);
  // load_if_present: the jinja file alone is a template; a config without chat_template and an
  // empty folder are none; a malformed config is an error, not "no template".
  ASSERT_TRUE(CheckpointChatTemplate::load_if_present(dir).has_value());
  EXPECT_EQ(CheckpointChatTemplate::load_if_present(dir)->apply(c.context.at("messages"), request_for(c)), c.output);
  std::filesystem::remove(dir / "chat_template.jinja");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  EXPECT_FALSE(CheckpointChatTemplate::load_if_present(dir).has_value());
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": )";
  EXPECT_THROW(CheckpointChatTemplate::load_if_present(dir), std::runtime_error);
  std::filesystem::remove(dir / "tokenizer_config.json");
  EXPECT_FALSE(CheckpointChatTemplate::load_if_present(dir).has_value());
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateApi, NamedTemplatesAndRequestChecks) {
  const nlohmann::json config = nlohmann::json::parse(R"({
    "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false},
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ messages|length }}{{ x }}"},
                      {"name": "tool_use", "template": "T{{ tools|length if tools else 0 }}{{ eos_token }}"}]})");
  const CheckpointChatTemplate chat = CheckpointChatTemplate::from_config(config, "config");
  const OJson messages = OJson::parse(R"([{"role": "user", "content": "hi"}])");
  ChatRequest request;
  request.extra = OJson::parse(R"({"x": "!"})");
  EXPECT_EQ(chat.apply(messages, request), "D<s>1!");
  request.tools = OJson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(chat.apply(messages, request), "T1</s>");
  const CheckpointChatTemplate tool_use = CheckpointChatTemplate::from_config(config, "config", std::nullopt, "tool_use");
  EXPECT_EQ(tool_use.apply(messages), "T0</s>");

  EXPECT_THROW(chat.apply(OJson::object()), std::invalid_argument);
  request.extra = OJson::parse(R"({"messages": []})");
  EXPECT_THROW(chat.apply(messages, request), std::invalid_argument);
  EXPECT_THROW(CheckpointChatTemplate::from_config(config, "config", std::nullopt, "nope"), std::runtime_error);
  EXPECT_THROW(CheckpointChatTemplate::from_config(nlohmann::json::parse(R"({"chat_template": [{"name": "x", "template": ""}]})"),
                                                   "config"),
               std::runtime_error);
  try {
    CheckpointChatTemplate::from_config(nlohmann::json::parse(R"({"chat_template": "{% if %}"})"), "cfg.json");
    ADD_FAILURE() << "no error for a bad template";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1, column"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moert::text
