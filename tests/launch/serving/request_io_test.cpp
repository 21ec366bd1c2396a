#include "launch/serving/output_file.h"
#include "launch/serving/openai_batch.h"
#include "launch/serving/request_io.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert::serving {
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
}  // namespace moert::serving

namespace moert::serving {
namespace {

TEST(RequestIo, GenerationControlFields) {
  Result<Request> r = parse_request_line(
      R"({"id": "c", "prompt_token_ids": [1], "max_tokens": 8, "stop": "\n\n", "ignore_eos": true, "min_tokens": 2,
          "presence_penalty": 0.5, "frequency_penalty": -0.25, "repetition_penalty": 1.1, "logprobs": 3})");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(r->params.ignore_eos);
  EXPECT_EQ(r->params.min_tokens, 2);
  EXPECT_FLOAT_EQ(r->params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->params.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(r->params.repetition_penalty, 1.1f);
  EXPECT_EQ(r->params.logprobs, 3);
  r = parse_request_line(R"({"id": "c", "prompt_token_ids": [1], "stop": ["a", "b"], "logprobs": null})");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->params.logprobs, -1);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"id": "a", "prompt_token_ids": [1], "stop": [1]})", "'stop' must be a string or a list of strings"},
      {R"({"id": "a", "prompt_token_ids": [1], "ignore_eos": 1})", "'ignore_eos' = 1 must be true or false"},
      {R"({"id": "a", "prompt_token_ids": [1], "min_tokens": 99})", "min_tokens = 99"},
      {R"({"id": "a", "prompt_token_ids": [1], "logprobs": 4294967299})", "is outside [-2147483648, 2147483647]"},
      {R"({"id": "a", "prompt": "hi"})", "'prompt' needs the checkpoint's tokenizer"},
      // What an OpenAI batch line's result needs stays with rank 0's reader, never in a request.
      {R"({"id": "a", "prompt_token_ids": [1], "openai": {"custom_id": "a"}})", "unknown key 'openai'"},
  };
  for (const auto& [line, needle] : cases) {
    const Status status = parse_request_line(line).status();
    EXPECT_NE(status.message().find(needle), std::string::npos) << line << ": " << status.to_string();
  }
}

TEST(OpenAiBatch, TranslatesChatAndCompletionBodies) {
  const nlohmann::json chat = nlohmann::json::parse(R"({"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions",
      "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9,
               "temperature": 0.5, "logprobs": true, "top_logprobs": 2, "stop": "x", "seed": 3, "user": "u"}})");
  ASSERT_TRUE(is_openai_batch_line(chat));
  Result<nlohmann::json> r = openai_to_request(chat, 1700000000);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)["id"], "c1");
  EXPECT_EQ((*r)["max_tokens"], 9);
  EXPECT_EQ((*r)["logprobs"], 2);
  EXPECT_EQ((*r)["messages"][0]["content"], "hi");
  EXPECT_EQ((*r)["openai"], nlohmann::json::parse(
                                R"({"custom_id": "c1", "endpoint": "chat", "model": "m", "created": 1700000000})"));
  const nlohmann::json completion = nlohmann::json::parse(
      R"({"custom_id": "p1", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": [5, 6], "logprobs": 1}})");
  r = openai_to_request(completion, 0);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)["prompt_token_ids"], nlohmann::json({5, 6}));
  EXPECT_EQ((*r)["logprobs"], 1);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"custom_id": 5, "url": "/v1/completions", "body": {"prompt": "a"}})", "'custom_id' must be a string"},
      {R"({"custom_id": "a", "url": "/v1/embeddings", "body": {}})", "is not /v1/chat/completions"},
      {R"({"custom_id": "a", "method": "GET", "url": "/v1/completions", "body": {"prompt": "a"}})", "'method'"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "a", "logit_bias": {}}})",
       "'body.logit_bias' is not supported"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": {"messages": []}})", "'body.messages' is not supported by moert on /v1/completions"},
      {R"({"custom_id": "a", "url": "/v1/chat/completions", "body": {"prompt": "x"}})", "not supported"},
      {R"({"custom_id": "a", "url": "/v1/chat/completions", "body": {}})", "'body.messages' is missing"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": ["a", "b"]}})", "one prompt per batch line"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "a", "stream": true}})", "'body.stream' must be false"},
  };
  for (const auto& [line, needle] : bad) {
    const Status status = openai_to_request(nlohmann::json::parse(line), 0).status();
    EXPECT_NE(status.message().find(needle), std::string::npos) << line << ": " << status.to_string();
  }
}

TEST(OpenAiBatch, OutputAndErrorLinesHaveTheBatchShape) {
  RequestOutput output;
  output.id = "c1";
  std::string openai = R"({"custom_id": "c1", "endpoint": "chat", "model": "m", "created": 7})";
  SampleOutput sample;
  sample.token_ids = {4, 5};
  sample.text = "hello";
  sample.finish_reason = "stop";
  sample.stop_string = "\n";
  sample.logprobs = {{4, -0.5, {{4, -0.5}, {9, -1.5}}}, {5, -0.25, {{5, -0.25}, {1, -2.0}}}};
  output.outputs = {sample};
  output.prompt_tokens = 3;
  output.output_tokens = 2;
  EXPECT_EQ(nlohmann::json::parse(format_output_line(output))["id"], "c1");  // no openai object: moert's shape
  const nlohmann::json line = nlohmann::json::parse(format_output_line(output, openai));
  EXPECT_EQ(line["custom_id"], "c1");
  EXPECT_TRUE(line["error"].is_null());
  EXPECT_EQ(line["response"]["status_code"], 200);
  const nlohmann::json& body = line["response"]["body"];
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["created"], 7);
  EXPECT_EQ(body["choices"][0]["message"], nlohmann::json::parse(R"({"role": "assistant", "content": "hello"})"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["stop_reason"], "\n");
  EXPECT_EQ(body["choices"][0]["logprobs"]["content"][1]["top_logprobs"][1]["logprob"], -2.0);
  EXPECT_EQ(body["usage"], nlohmann::json::parse(R"({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})"));
  openai = R"({"custom_id": "c1", "endpoint": "completions", "model": "m", "created": 7})";
  const nlohmann::json completion = nlohmann::json::parse(format_output_line(output, openai));
  EXPECT_EQ(completion["response"]["body"]["object"], "text_completion");
  EXPECT_EQ(completion["response"]["body"]["choices"][0]["text"], "hello");
  EXPECT_EQ(completion["response"]["body"]["choices"][0]["logprobs"]["token_logprobs"], nlohmann::json({-0.5, -0.25}));
  const nlohmann::json error = nlohmann::json::parse(format_error_line("\"c2\"", "bad thing", 4, true));
  EXPECT_EQ(error["custom_id"], "c2");
  EXPECT_TRUE(error["response"].is_null());
  EXPECT_EQ(error["error"]["message"], "bad thing");

  // Error lines and OpenAI lines count as done on resume.
  testing::ScratchDir scratch("openai-batch");
  const std::string path = scratch / "out.jsonl";
  testing::write_file(path, format_output_line(output, openai) + "\n" + format_error_line("\"c2\"", "x", 4, true) + "\n" +
                                format_error_line("null", "not JSON", 9, false) + "\n" +
                                format_error_line("7", "too long", 10, false) + "\n");
  int torn = 0;
  EXPECT_EQ(*read_finished_ids(path, &torn),
            (std::unordered_set<std::string>{"\"c1\"", "\"c2\"", error_line_key("9"), "7"}));
  EXPECT_EQ(torn, 0);
}

}  // namespace
}  // namespace moert::serving

namespace moert::serving {
namespace {

// Structured output fields (docs/structured-output.md): response_format and vLLM's guided_*.
TEST(RequestIo, StructuredOutputFields) {
  const std::pair<const char*, std::pair<const char*, const char*>> good[] = {
      {R"("response_format": {"type": "json_object"})", {"json_object", ""}},
      {R"("response_format": {"type": "text"})", {"", ""}},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true, "schema": {"type": "integer"}}})",
       {"json_schema", R"({"type":"integer"})"}},
      {R"("guided_json": "{\"type\": \"string\"}")", {"json_schema", R"({"type": "string"})"}},
      {R"("guided_regex": "a+")", {"regex", "a+"}},
      {R"("guided_grammar": "root ::= \"x\"")", {"grammar", R"(root ::= "x")"}},
      {R"("guided_choice": ["a", "b"])", {"choice", R"(["a","b"])"}},
  };
  for (const auto& [field, expected] : good) {
    Result<Request> r = parse_request_line(std::string(R"({"id": "a", "prompt_token_ids": [1], )") + field + "}");
    ASSERT_TRUE(r.is_ok()) << field << ": " << r.status().message();
    EXPECT_EQ(r->params.guided_kind, expected.first) << field;
    EXPECT_EQ(r->params.guided_spec, expected.second) << field;
  }
  const std::pair<const char*, const char*> bad[] = {
      {R"("response_format": {"type": "yaml"})", "'response_format.type' = \"yaml\" is not text, json_object or json_schema"},
      {R"("response_format": {"type": "json_schema"})", "'response_format.json_schema' must be an object"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})", "lacks 'schema'"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "extra": 1}})", "'response_format.json_schema.extra'"},
      {R"("guided_choice": [])", "'guided_choice' must be a non-empty list"},
      {R"("guided_choice": ["a", 1])", "list of strings, got 1"},
      {R"("guided_regex": 5)", "'guided_regex' must be a string"},
      {R"("guided_regex": "a", "guided_choice": ["b"])", "and another constraint"},
  };
  for (const auto& [field, needle] : bad) {
    Result<Request> r = parse_request_line(std::string(R"({"id": "a", "prompt_token_ids": [1], )") + field + "}");
    ASSERT_FALSE(r.is_ok()) << field;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }
  // OpenAI batch bodies pass response_format through, chat and completions alike.
  for (const char* url : {"/v1/chat/completions", "/v1/completions"}) {
    nlohmann::json line = {{"custom_id", "c"}, {"url", url},
                           {"body", {{"response_format", {{"type", "json_object"}}}, {"guided_choice", {"x"}}}}};
    line["body"][std::string(url) == "/v1/completions" ? "prompt" : "messages"] =
        std::string(url) == "/v1/completions" ? nlohmann::json("p") : nlohmann::json::array({{{"role", "user"}, {"content", "q"}}});
    Result<nlohmann::json> r = openai_to_request(line, 0);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)["response_format"]["type"], "json_object");
    EXPECT_EQ((*r)["guided_choice"], nlohmann::json({"x"}));
  }
}

}  // namespace
}  // namespace moert::serving
