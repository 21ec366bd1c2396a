#include "runtime/engine/request_io.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert::engine {
namespace {

TEST(RequestIo, ParsesEveryField) {
  Result<Request> r = parse_request_line(
      R"({"id": "r1", "prompt_token_ids": [5, 9, 2], "max_tokens": 32, "temperature": 0.5, "top_p": 0.9,
          "top_k": 40, "seed": 7, "n": 2, "stop_token_ids": [3]})");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->id, "r1");
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{5, 9, 2}));
  EXPECT_EQ(r->params.max_tokens, 32);
  EXPECT_FLOAT_EQ(r->params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->params.top_p, 0.9f);
  EXPECT_EQ(r->params.top_k, 40);
  EXPECT_EQ(r->params.seed, 7);
  EXPECT_EQ(r->params.n, 2);
  EXPECT_EQ(r->params.stop_token_ids, (std::vector<int32_t>{3}));
  Result<Request> minimal = parse_request_line(R"({"id": 12, "prompt_token_ids": [1]})");
  ASSERT_TRUE(minimal.is_ok());
  EXPECT_EQ(minimal->id, "12");
  EXPECT_TRUE(minimal->params.is_greedy());
}

TEST(RequestIo, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"{nope", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"prompt_token_ids": [1]})", "missing 'id'"},
      {R"({"id": "a"})", "lacks 'prompt_token_ids'"},
      {R"({"id": "a", "prompt_token_ids": [1, 2.5]})", "'prompt_token_ids'[1] = 2.5"},
      {R"({"id": "a", "prompt_token_ids": [1], "top_p": 1.5})", "top_p"},
      {R"({"id": "a", "prompt_token_ids": [1], "max_token": 3})", "unknown key 'max_token'"},
      {R"({"id": "a", "prompt_token_ids": [1], "n": "two"})", "'n' = \"two\" must be an integer"},
  };
  for (const auto& [line, needle] : cases) {
    Result<Request> r = parse_request_line(line);
    ASSERT_FALSE(r.is_ok()) << line;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }
}

TEST(RequestIo, OutputLinesAndResume) {
  testing::ScratchDir scratch("request-io");
  const std::string path = scratch / "out.jsonl";
  RequestOutput output;
  output.id = "r1";
  output.outputs = {{{4, 5}, "length"}};
  output.prompt_tokens = 3;
  output.output_tokens = 2;
  {
    auto writer = OutputWriter::open_for_append(path);
    ASSERT_TRUE(writer.is_ok());
    ASSERT_TRUE((*writer)->write_line(format_output_line(output)).is_ok());
  }
  const nlohmann::json line = nlohmann::json::parse(testing::read_file(path));
  EXPECT_EQ(line["outputs"][0]["token_ids"], nlohmann::json({4, 5}));
  EXPECT_EQ(line["outputs"][0]["finish_reason"], "length");
  // A torn line from a killed job is ignored, and the next write starts on a fresh line.
  testing::write_file(path, testing::read_file(path) + R"({"id": "r2", "outp)");
  int torn = 0;
  auto ids = read_finished_ids(path, &torn);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::unordered_set<std::string>{"r1"}));
  EXPECT_EQ(torn, 1);
  {
    auto writer = OutputWriter::open_for_append(path);
    output.id = "r3";
    ASSERT_TRUE((*writer)->write_line(format_output_line(output)).is_ok());
  }
  ids = read_finished_ids(path, &torn);
  EXPECT_EQ(*ids, (std::unordered_set<std::string>{"r1", "r3"}));
  EXPECT_EQ(torn, 1);
}

}  // namespace
}  // namespace moert::engine
