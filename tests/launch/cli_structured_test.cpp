// Structured output end to end (docs/structured-output.md): a tiny random model over the real Qwen3
// vocabulary (151,669 ids) generates under many JSON schemas (tests/data/grammar/e2e_schemas.json),
// regexes, choices and a GBNF grammar, at temperature 0 and 1, on 1 and 2 ranks, with and without
// --spec ngram. Every output that finished with "stop" must be valid:
//   * by npm ajv + ajv-formats: tests/data/grammar/e2e_oracle.json holds ajv's verdict on every
//     output this test produced when the data was made (tests/text/make_grammar_oracle.js);
//   * by this file's own small validator (value-level, independent of the grammar code), which
//     also covers outputs the oracle has not seen (e.g. another CPU's rounding).
// Results are identical on 1 and 2 ranks; unsupported schemas fail their line alone, by name.
// MOERT_STRUCTURED_OUTPUTS=<file> writes the finished outputs for the oracle generator.
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

using nlohmann::ordered_json;
using testing::run_command;

std::string mpirun(int ranks) {
  return "timeout -k 5 300 mpirun -np " + std::to_string(ranks) + " --oversubscribe --bind-to none ";
}

size_t codepoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool full_match(const std::string& text, const std::string& pattern) {
  return std::regex_match(text, std::regex(pattern, std::regex::ECMAScript));
}

bool valid_date(const std::string& s) {
  if (!full_match(s, "[0-9]{4}-[0-9]{2}-[0-9]{2}")) return false;
  const int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
  return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 && leap ? 29 : kDays[m - 1]);
}

bool valid_time(const std::string& s) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex("([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?(Z|z|[+-]([0-9]{2}):([0-9]{2}))"))) return false;
  if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
  return m[6].length() == 0 || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59);
}

bool valid_format(const std::string& s, const std::string& format) {
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  if (format == "uuid") return full_match(s, "[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}");
  if (format == "ipv4") return full_match(s, "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])");
  if (format == "ipv6") return full_match(s, "([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}");
  ADD_FAILURE() << "validator lacks format " << format;
  return false;
}

// Value-level validation of the keywords e2e_schemas.json uses.
bool validates(const ordered_json& v, const ordered_json& s, const ordered_json& root) {
  if (s.contains("$ref")) return validates(v, root.at(ordered_json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
  if (s.contains("anyOf")) {
    for (const auto& b : s["anyOf"]) {
      if (validates(v, b, root)) return true;
    }
    return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& b : s["oneOf"]) n += validates(v, b, root);
    return n == 1;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("type")) {
    const ordered_json types = s["type"].is_array() ? s["type"] : ordered_json::array({s["type"]});
    bool ok = s.value("nullable", false) && v.is_null();
    for (const auto& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
           (t == "integer" && v.is_number_integer()) || (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    for (const auto& r : s.value("required", ordered_json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (auto& [key, value] : v.items()) {
      const bool declared = s.contains("properties") && s["properties"].contains(key);
      if (declared && !validates(value, s["properties"][key], root)) return false;
      if (!declared && s.value("additionalProperties", ordered_json(true)) == ordered_json(false)) return false;
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    const size_t prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i < prefix) {
        if (!validates(v[i], s["prefixItems"][i], root)) return false;
      } else if (s.contains("items")) {
        if (s["items"] == ordered_json(false) || !validates(v[i], s["items"], root)) return false;
      }
    }
  }
  if (v.is_string()) {
    const std::string text = v.get<std::string>();
    if (s.contains("minLength") && codepoints(text) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && codepoints(text) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(text, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript))) return false;
    if (s.contains("format") && !valid_format(text, s["format"])) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  return true;
}

void make_qwen3_vocabulary_model(const std::string& model) {
  ASSERT_EQ(run_command(testing::moert_binary() +
                        " make-model --arch qwen3_moe --preset tiny --vocab-size 151669 --hidden-size 64 "
                        "--num-layers 2 --num-heads 2 --num-kv-heads 1 --head-dim 32 --expert-size 64 --out " + model)
                .exit_code, 0);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3/" + file, model + "/" + file);
  }
}

struct Expectation {
  std::string schema;  // e2e_schemas.json name, or "" for the non-schema kinds
  std::string regex;   // a full-match regex for regex, choice and grammar lines
  std::string error;   // the error line's message must contain this
};

TEST(CliStructured, FinishedOutputsAreValidOnOneAndTwoRanksWithAndWithoutSpec) {
  testing::ScratchDir scratch("cli-structured");
  const std::string moert = testing::moert_binary(), model = scratch / "m";
  ASSERT_NO_FATAL_FAILURE(make_qwen3_vocabulary_model(model));
  std::ifstream schemas_in(std::string(MOERT_GRAMMAR_DATA_DIR) + "/e2e_schemas.json");
  const ordered_json schemas = ordered_json::parse(schemas_in);
  std::ifstream oracle_in(std::string(MOERT_GRAMMAR_DATA_DIR) + "/e2e_oracle.json");
  const ordered_json oracle = oracle_in ? ordered_json::parse(oracle_in) : ordered_json::object();
  std::map<std::string, ordered_json> schema_by_name;
  std::map<std::string, Expectation> expect;
  std::string input;
  const auto add = [&](const std::string& id, ordered_json line, Expectation e) {
    if (!line.contains("custom_id")) line["id"] = id;
    input += line.dump() + "\n";
    expect[id] = std::move(e);
  };
  const std::vector<std::pair<double, int>> draws = {{0.0, 1}, {1.0, 1}, {1.0, 2}};
  for (const auto& entry : schemas) {
    const std::string name = entry["name"];
    schema_by_name[name] = entry["schema"];
    for (const auto& [temperature, seed] : draws) {
      add(name + "-t" + std::to_string(static_cast<int>(temperature)) + "-s" + std::to_string(seed),
          {{"prompt", "Answer in JSON: " + name}, {"max_tokens", 64}, {"temperature", temperature}, {"seed", seed},
           {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", name}, {"strict", true}, {"schema", entry["schema"]}}}}}},
          {name, "", ""});
    }
  }
  for (const auto& [temperature, seed] : draws) {
    const std::string tag = "-t" + std::to_string(static_cast<int>(temperature)) + "-s" + std::to_string(seed);
    const ordered_json common = {{"prompt", "Go"}, {"max_tokens", 32}, {"temperature", temperature}, {"seed", seed}};
    ordered_json line = common;
    line["guided_regex"] = "[a-z]{2,5}@[a-z]{2,4}\\.(com|org)";
    add("regex" + tag, line, {"", "[a-z]{2,5}@[a-z]{2,4}\\.(com|org)", ""});
    line = common;
    line["guided_choice"] = {"alpha", "beta", "gamma delta"};
    add("choice" + tag, line, {"", "alpha|beta|gamma delta", ""});
    line = common;
    line["guided_grammar"] = "root ::= \"(\" num (\",\" num){0,3} \")\"\nnum ::= [0-9]{1,3}";
    add("grammar" + tag, line, {"", "\\([0-9]{1,3}(,[0-9]{1,3}){0,3}\\)", ""});
  }
  // OpenAI batch lines, chat and completions.
  add("oa-chat", {{"custom_id", "oa-chat"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                  {"body", {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "JSON please"}}}}, {"max_tokens", 64},
                            {"temperature", 1}, {"seed", 5},
                            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", schema_by_name["person"]}}}}}}}},
      {"person", "", ""});
  add("oa-completion", {{"custom_id", "oa-completion"}, {"method", "POST"}, {"url", "/v1/completions"},
                        {"body", {{"model", "m"}, {"prompt", "Color:"}, {"max_tokens", 16}, {"temperature", 1}, {"seed", 6},
                                  {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", schema_by_name["color"]}}}}}}}},
      {"color", "", ""});
  // Lines that fail alone, by name.
  add("bad-not", {{"prompt", "x"}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"not", ordered_json::object()}}}}}}}},
      {"", "", "unsupported JSON Schema keyword 'not' at #"});
  add("bad-format", {{"prompt", "x"}, {"guided_json", {{"type", "string"}, {"format", "hostname"}}}}, {"", "", "string format 'hostname'"});
  add("bad-stop", {{"prompt", "x"}, {"guided_regex", "a+"}, {"stop", "a"}}, {"", "", "'stop' strings cannot be combined"});
  add("bad-gbnf", {{"prompt", "x"}, {"guided_grammar", "root ::= ("}}, {"", "", "grammar offset"});
  testing::write_file(scratch / "in.jsonl", input);

  std::map<std::string, std::set<std::string>> finished_texts;  // by schema, for the oracle generator
  std::map<std::string, ordered_json> first_run;
  int finished = 0, checked_by_ajv = 0;
  for (const std::string spec : {std::string(), std::string(" --spec ngram")}) {
    std::map<std::string, ordered_json> single;
    for (const std::string launcher : {std::string(), mpirun(2)}) {
      const std::string out = scratch / ("out" + std::to_string(spec.size()) + (launcher.empty() ? "-1" : "-2") + ".jsonl");
      const testing::CommandResult result = run_command(launcher + moert + " run --model " + model + " --input " +
                                                        (scratch / "in.jsonl") + " --output " + out +
                                                        " --threads 1 --kv-cache-mb 64" + spec);
      ASSERT_EQ(result.exit_code, 3) << result.err;  // the bad lines
      std::map<std::string, ordered_json> lines;
      std::istringstream in(testing::read_file(out));
      for (std::string text; std::getline(in, text);) {
        const ordered_json j = ordered_json::parse(text);
        const std::string id = j.contains("custom_id") ? j["custom_id"].get<std::string>() : j["id"].get<std::string>();
        lines[id] = j;
      }
      ASSERT_EQ(lines.size(), expect.size());
      for (const auto& [id, e] : expect) {
        const ordered_json& j = lines.at(id);
        if (!e.error.empty()) {
          ASSERT_TRUE(j.contains("error") && j["error"].is_object()) << id;
          EXPECT_NE(j["error"]["message"].get<std::string>().find(e.error), std::string::npos) << id << ": " << j["error"];
          continue;
        }
        std::string text, reason;
        if (j.contains("custom_id")) {
          const ordered_json& choice = j["response"]["body"]["choices"][0];
          text = choice.contains("message") ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
          reason = choice["finish_reason"];
        } else {
          text = j["outputs"][0]["text"];
          reason = j["outputs"][0]["finish_reason"];
        }
        if (reason != "stop") {
          EXPECT_EQ(reason, "length") << id;
          continue;
        }
        ++finished;
        if (!e.regex.empty()) {
          EXPECT_TRUE(full_match(text, e.regex)) << id << ": " << text;
          continue;
        }
        finished_texts[e.schema].insert(text);
        const ordered_json value = ordered_json::parse(text, nullptr, false);
        ASSERT_FALSE(value.is_discarded()) << id << ": not JSON: " << text;
        const ordered_json& schema = schema_by_name.at(e.schema);
        EXPECT_TRUE(validates(value, schema, schema)) << id << ": " << text;
        if (oracle.contains(e.schema) && oracle[e.schema].contains(text)) {
          ++checked_by_ajv;
          EXPECT_TRUE(oracle[e.schema][text].get<bool>()) << id << ": ajv rejects " << text;
        }
      }
      if (launcher.empty()) {
        single = lines;
      } else {
        for (const auto& [id, line] : lines) {
          if (line.contains("outputs")) EXPECT_EQ(line["outputs"], single.at(id)["outputs"]) << id;
          if (line.contains("response") && line["response"].is_object()) {
            EXPECT_EQ(line["response"]["body"]["choices"], single.at(id)["response"]["body"]["choices"]) << id;
          }
        }
      }
    }
  }
  // Enough outputs finish for the check to mean something, and ajv has seen them.
  EXPECT_GE(finished, 80);
  EXPECT_GE(checked_by_ajv, finished / 2) << "outputs unknown to tests/data/grammar/e2e_oracle.json: regenerate it";
  if (const char* path = std::getenv("MOERT_STRUCTURED_OUTPUTS")) {
    ordered_json dump = ordered_json::object();
    for (const auto& [schema, texts] : finished_texts) dump[schema] = texts;
    std::ofstream(path) << dump.dump(1) << "\n";
  }
}

// n > 1 samples (moert lines and an OpenAI chat line), a small KV pool that preempts, 4 ranks,
// and --resume of a job cut short: each sample valid, and every run holds the same results as
// an uninterrupted run on one rank (a sample's tokens depend only on its request, seed and index).
TEST(CliStructured, ParallelSamplesPreemptionAndResumeKeepConstrainedOutputs) {
  testing::ScratchDir scratch("cli-structured-resume");
  const std::string moert = testing::moert_binary(), model = scratch / "m";
  ASSERT_NO_FATAL_FAILURE(make_qwen3_vocabulary_model(model));
  std::ifstream schemas_in(std::string(MOERT_GRAMMAR_DATA_DIR) + "/e2e_schemas.json");
  std::map<std::string, ordered_json> schema_by_name;
  for (const auto& entry : ordered_json::parse(schemas_in)) schema_by_name[entry["name"]] = entry["schema"];
  std::string input;
  std::vector<std::string> ids;
  for (const std::string name : {"person", "digits", "list", "nested"}) {
    ids.push_back(name);
    input += ordered_json({{"id", name}, {"prompt", "Shared instructions, then: " + name}, {"n", 3}, {"max_tokens", 48},
                           {"temperature", 1}, {"seed", 9}, {"logprobs", 1}, {"guided_json", schema_by_name[name]}})
                 .dump() + "\n";
  }
  input += ordered_json({{"id", "pick"}, {"prompt", "Pick"}, {"n", 4}, {"max_tokens", 8}, {"temperature", 1}, {"seed", 2},
                         {"guided_choice", {"yes", "no", "maybe"}}})
               .dump() + "\n";
  ids.push_back("pick");
  input += ordered_json({{"custom_id", "oa"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                         {"body", {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "JSON"}}}}, {"n", 2},
                                   {"max_tokens", 48}, {"temperature", 1}, {"seed", 4},
                                   {"response_format", {{"type", "json_object"}}}}}})
               .dump() + "\n";
  ids.push_back("oa");
  testing::write_file(scratch / "in.jsonl", input);
  const auto read_lines = [](const std::string& path) {
    std::map<std::string, ordered_json> lines;
    std::istringstream in(testing::read_file(path));
    for (std::string text; std::getline(in, text);) {
      const ordered_json j = ordered_json::parse(text);
      lines[j.contains("custom_id") ? j["custom_id"].get<std::string>() : j["id"].get<std::string>()] = j;
    }
    return lines;
  };
  const std::string run = moert + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --threads 1 ";
  const testing::CommandResult roomy = run_command(run + "--kv-cache-mb 64 --output " + (scratch / "roomy.jsonl"));
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  const std::map<std::string, ordered_json> expected = read_lines(scratch / "roomy.jsonl");
  ASSERT_EQ(expected.size(), ids.size());
  int finished = 0;
  for (const auto& [id, line] : expected) {
    const ordered_json outputs = line.contains("outputs") ? line["outputs"] : line["response"]["body"]["choices"];
    ASSERT_EQ(outputs.size(), id == "pick" ? 4u : id == "oa" ? 2u : 3u) << id;
    for (const auto& o : outputs) {
      const std::string text = o.contains("message") ? o["message"]["content"].get<std::string>() : o["text"].get<std::string>();
      if (o["finish_reason"] != "stop") continue;
      ++finished;
      if (id == "pick") {
        EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe") << text;
        continue;
      }
      const ordered_json value = ordered_json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << id << ": not JSON: " << text;
      if (id == "oa") {
        EXPECT_TRUE(value.is_object()) << text;
      } else {
        EXPECT_TRUE(validates(value, schema_by_name.at(id), schema_by_name.at(id))) << id << ": " << text;
      }
    }
  }
  EXPECT_GE(finished, 8);
  // 10 blocks of 16 tokens: a request's samples fit, the job's do not.
  const testing::CommandResult tight = run_command(run + "--kv-blocks 11 --block-size 16 --max-seqs 4 --output " + (scratch / "tight.jsonl"));
  ASSERT_EQ(tight.exit_code, 0) << tight.err;
  const std::map<std::string, ordered_json> preempted = read_lines(scratch / "tight.jsonl");
  int64_t preemptions = 0;
  for (const auto& [id, line] : preempted) {
    if (line.contains("num_preemptions")) preemptions += line["num_preemptions"].get<int64_t>();
    if (line.contains("outputs")) EXPECT_EQ(line["outputs"], expected.at(id)["outputs"]) << id;
    if (line.contains("response")) EXPECT_EQ(line["response"]["body"]["choices"], expected.at(id)["response"]["body"]["choices"]) << id;
  }
  EXPECT_GT(preemptions, 0);
  // 4 ranks, each masking and sampling the requests it serves: the same results.
  const testing::CommandResult four = run_command(mpirun(4) + run + "--kv-cache-mb 64 --output " + (scratch / "four.jsonl"));
  ASSERT_EQ(four.exit_code, 0) << four.err;
  for (const auto& [id, line] : read_lines(scratch / "four.jsonl")) {
    if (line.contains("outputs")) EXPECT_EQ(line["outputs"], expected.at(id)["outputs"]) << id;
    if (line.contains("response")) EXPECT_EQ(line["response"]["body"]["choices"], expected.at(id)["response"]["body"]["choices"]) << id;
  }
  // Cut short: two results and a torn line kept; --resume serves exactly the rest.
  std::istringstream whole(testing::read_file(scratch / "roomy.jsonl"));
  std::vector<std::string> kept;
  for (std::string text; std::getline(whole, text);) kept.push_back(text);
  std::filesystem::copy_file(scratch / "roomy.jsonl.manifest.json", scratch / "cut.jsonl.manifest.json");
  testing::write_file(scratch / "cut.jsonl", kept[0] + "\n" + kept[1] + "\n" + kept[2].substr(0, 30));
  const testing::CommandResult resumed = run_command(run + "--kv-cache-mb 64 --resume --output " + (scratch / "cut.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const std::map<std::string, ordered_json> after = read_lines(scratch / "cut.jsonl");
  ASSERT_EQ(after.size(), expected.size());
  for (const auto& [id, line] : after) {
    if (line.contains("outputs")) EXPECT_EQ(line["outputs"], expected.at(id)["outputs"]) << id;
    if (line.contains("response")) EXPECT_EQ(line["response"]["body"]["choices"], expected.at(id)["response"]["body"]["choices"]) << id;
  }
}

}  // namespace
}  // namespace moert
