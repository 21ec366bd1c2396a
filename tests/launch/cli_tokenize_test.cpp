// `moert tokenize` through the binary (cli_test): the tokenizers' oracle ids and the chat
// templates' rendered ids.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/cli_test_support.h"
#if MOERT_TEST_WITH_CHAT
#include "text/tokenizer/tokenizer.h"
#endif

namespace moert::cli_test {
namespace {

// `moert tokenize` gives exactly Hugging Face tokenizers' ids, decode and skip-special decode
// on every oracle text of the three real tokenizers (tests/data/tokenizers), from a folder
// holding only the tokenizer files; a malformed line gets its own error line, the others run.
TEST(CliTokenize, EqualsTheTokenizersOracleAndReportsBadLines) {
  testing::ScratchDir scratch("cli-tokenize");
  for (const std::string name : {"qwen3", "deepseek_v3", "gpt_oss"}) {
    const std::string dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/" + name;
    std::vector<nlohmann::json> expected;
    std::string input;
    for (const nlohmann::json& line : read_jsonl(dir + "/oracle.jsonl")) {
      if (!line.contains("text")) continue;  // decode-only cases
      expected.push_back(line);
      input += nlohmann::json({{"text", line["text"]}}).dump() + "\n";
    }
    input += "{broken\n";
    testing::write_file(scratch / (name + ".in.jsonl"), input);
    const std::string out = scratch / (name + ".out.jsonl");
    const testing::CommandResult result = run_command(moert() + " tokenize --model " + dir + " --input " +
                                                      (scratch / (name + ".in.jsonl")) + " --output " + out);
    if (result.err.find("built without the tokenizer") != std::string::npos) GTEST_SKIP() << result.err;
    EXPECT_EQ(result.exit_code, 3) << result.err;  // the one broken line
    EXPECT_NE(result.err.find("line " + std::to_string(expected.size() + 1)), std::string::npos) << result.err;
    const std::vector<nlohmann::json> got = read_jsonl(out);
    ASSERT_EQ(got.size(), expected.size() + 1) << name;
    ASSERT_GT(expected.size(), 300u) << name;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(got[i]["ids"], expected[i]["ids"]) << name << " line " << i + 1 << ": " << expected[i]["text"];
      EXPECT_EQ(got[i]["decoded"], expected[i]["decode"]) << name << " line " << i + 1;
      EXPECT_EQ(got[i]["decoded_skip_special"], expected[i]["decode_skip"]) << name << " line " << i + 1;
    }
    EXPECT_TRUE(got.back().contains("error"));
  }
}

#if MOERT_TEST_WITH_CHAT
// Chats through the checkpoint's chat template: every oracle conversation of Qwen3 and
// DeepSeek-V3 (rendered by @huggingface/jinja with the generation prompt) gives the ids of the
// oracle's text; the conversations the template refuses give an error line.
TEST(CliTokenize, ChatsGiveTheIdsOfTheRenderedTemplate) {
  testing::ScratchDir scratch("cli-tokenize-chat");
  for (const std::string name : {"qwen3", "deepseek_v3"}) {
    const std::string dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/" + name;
    const text::Tokenizer tokenizer = text::Tokenizer::load(dir);
    std::string input;
    std::vector<nlohmann::ordered_json> cases;
    // Ordered: tool definitions must reach the template with their keys in the file's order.
    std::istringstream oracle(testing::read_file(std::string(MOERT_CHAT_TEMPLATE_DATA_DIR) + "/" + name + ".oracle.jsonl"));
    for (std::string text; std::getline(oracle, text);) {
      const nlohmann::ordered_json c = nlohmann::ordered_json::parse(text);
      const nlohmann::ordered_json& context = c["context"];
      if (context.value("add_generation_prompt", false) != true) continue;
      nlohmann::ordered_json line = {{"messages", context["messages"]}};
      if (!context["tools"].is_null()) line["tools"] = context["tools"];
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
      for (const auto& [key, value] : context.items()) {
        if (key != "messages" && key != "tools" && key != "documents" && key != "add_generation_prompt") kwargs[key] = value;
      }
      line["chat_template_kwargs"] = kwargs;
      input += line.dump() + "\n";
      cases.push_back(c);
    }
    ASSERT_GE(cases.size(), 10u) << name;
    testing::write_file(scratch / (name + ".in.jsonl"), input);
    const std::string out = scratch / (name + ".out.jsonl");
    const testing::CommandResult result = run_command(moert() + " tokenize --model " + dir + " --input " +
                                                      (scratch / (name + ".in.jsonl")) + " --output " + out);
    const std::vector<nlohmann::json> got = read_jsonl(out);
    ASSERT_EQ(got.size(), cases.size()) << result.err;
    int errors = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(name + " " + cases[i]["case"].get<std::string>());
      if (cases[i].contains("output")) {
        EXPECT_EQ(got[i]["ids"], nlohmann::json(tokenizer.encode(cases[i]["output"].get<std::string>())));
        EXPECT_EQ(got[i]["decoded"], cases[i]["output"]);
      } else {
        ++errors;
        ASSERT_TRUE(got[i].contains("error")) << got[i];
        if (cases[i].value("raised", false)) {
          EXPECT_NE(got[i]["error"].get<std::string>().find(cases[i]["error"].get<std::string>()), std::string::npos);
        }
      }
    }
    EXPECT_EQ(result.exit_code, errors > 0 ? 3 : 0) << result.err;
  }
}
#endif

}  // namespace
}  // namespace moert::cli_test
