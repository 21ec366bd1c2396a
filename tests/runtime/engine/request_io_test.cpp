#include "runtime/engine/output_file.h"
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

TEST(RequestIo, OutputFileManifestResumeAndTornLines) {
  testing::ScratchDir scratch("request-io");
  const std::string path = scratch / "out.jsonl";
  const OutputManifest manifest = {{"model", "m1"}, {"input", "i1"}};
  RequestOutput output;
  output.id = "r1";
  output.id_json = "\"r1\"";
  SampleOutput sample;
  sample.token_ids = {4, 5};
  sample.finish_reason = "length";
  output.outputs = {sample};
  output.prompt_tokens = 3;
  output.output_tokens = 2;
  {
    auto writer = OutputFile::open(path, manifest, /*resume=*/false);
    ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
    EXPECT_TRUE((*writer)->finished_ids().empty());
    ASSERT_TRUE((*writer)->write_line(format_output_line(output)).is_ok());
    // Held open: a second opener is refused while the first holds the lock.
    const Status locked = OutputFile::open(path, manifest, true).status();
    EXPECT_NE(locked.message().find("another job is writing it"), std::string::npos) << locked.to_string();
  }
  const nlohmann::json line = nlohmann::json::parse(testing::read_file(path));
  EXPECT_EQ(line["id"], "r1");
  EXPECT_EQ(line["outputs"][0]["token_ids"], nlohmann::json({4, 5}));
  EXPECT_EQ(line["outputs"][0]["finish_reason"], "length");
  EXPECT_TRUE(nlohmann::json::parse(testing::read_file(manifest_path(path))).is_object());
  // Non-empty: refused without --resume, refused with another manifest.
  EXPECT_NE(OutputFile::open(path, manifest, false).status().message().find("pass --resume"), std::string::npos);
  const Status other = OutputFile::open(path, {{"model", "m2"}, {"input", "i1"}}, true).status();
  EXPECT_NE(other.message().find("model is m1 there and m2 here"), std::string::npos) << other.to_string();
  // A torn line from a killed job is cut on resume; the next line starts clean.
  testing::write_file(path, testing::read_file(path) + R"({"id": "r2", "outp)");
  int torn = 0;
  EXPECT_EQ(*read_finished_ids(path, &torn), (std::unordered_set<std::string>{"\"r1\""}));
  EXPECT_EQ(torn, 1);
  {
    auto writer = OutputFile::open(path, manifest, true);
    ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
    EXPECT_EQ((*writer)->cut_bytes(), 18);
    EXPECT_EQ((*writer)->finished_ids(), (std::unordered_set<std::string>{"\"r1\""}));
    output.id = "3";
    output.id_json = "3";  // a numeric id comes back as a number
    ASSERT_TRUE((*writer)->write_line(format_output_line(output)).is_ok());
  }
  EXPECT_EQ(*read_finished_ids(path, &torn), (std::unordered_set<std::string>{"\"r1\"", "3"}));
  EXPECT_EQ(torn, 0);
  EXPECT_FALSE(OutputFile::open(scratch.path(), manifest, false).is_ok());  // a directory
}

}  // namespace
}  // namespace moert::engine
