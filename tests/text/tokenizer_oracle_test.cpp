// Every line of tests/data/tokenizers/<name>/oracle.jsonl (made by Hugging Face `tokenizers`,
// tests/text/make_tokenizer_oracle.js): exact ids, both decodes, and streaming decode.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/text/tokenizer_test_util.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

using testing::cached_tokenizer;
using testing::quoted;
using testing::tokenizer_data_dir;

struct OracleCase {
  size_t line = 0;
  bool has_text = false;
  std::string text;
  std::vector<int32_t> ids;
  std::string decode;
  std::string decode_skip;
};

std::vector<OracleCase> read_oracle(const std::string& name) {
  const auto path = tokenizer_data_dir() / name / "oracle.jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<OracleCase> cases;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const auto json = nlohmann::json::parse(line);
    OracleCase c;
    c.line = number;
    c.has_text = json.contains("text");
    if (c.has_text) c.text = json.at("text").get<std::string>();
    c.ids = json.at("ids").get<std::vector<int32_t>>();
    c.decode = json.at("decode").get<std::string>();
    c.decode_skip = json.at("decode_skip").get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string ids_string(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

// Streams `ids` through an IncrementalDecoder; every piece must be valid UTF-8.
std::string stream_decode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip, bool& pieces_valid) {
  IncrementalDecoder decoder(tokenizer, skip);
  std::string text;
  pieces_valid = true;
  for (const int32_t id : ids) {
    const std::string piece = decoder.push(id);
    pieces_valid = pieces_valid && is_valid_utf8(piece);
    text += piece;
  }
  const std::string rest = decoder.finish();
  pieces_valid = pieces_valid && is_valid_utf8(rest);
  return text + rest;
}

class TokenizerOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerOracleTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  const Tokenizer& tokenizer = cached_tokenizer(name);
  const std::vector<OracleCase> cases = read_oracle(name);
  ASSERT_GT(cases.size(), 100u);

  size_t num_encode = 0, num_decode_only = 0, failures = 0;
  auto report = [&](const OracleCase& c, const std::string& what) {
    if (++failures <= 20) ADD_FAILURE() << name << " oracle line " << c.line << ": " << what;
  };
  for (const OracleCase& c : cases) {
    if (c.has_text) {
      ++num_encode;
      const std::vector<int32_t> ids = tokenizer.encode(c.text);
      if (ids != c.ids) {
        report(c, "encode(" + quoted(c.text) + ") = " + ids_string(ids) + ", expected " + ids_string(c.ids));
      }
    } else {
      ++num_decode_only;
    }
    const std::string decoded = tokenizer.decode(c.ids, false);
    if (decoded != c.decode) report(c, "decode = " + quoted(decoded) + ", expected " + quoted(c.decode));
    const std::string decoded_skip = tokenizer.decode(c.ids, true);
    if (decoded_skip != c.decode_skip) {
      report(c, "decode(skip) = " + quoted(decoded_skip) + ", expected " + quoted(c.decode_skip));
    }
    for (const bool skip : {false, true}) {
      bool pieces_valid = false;
      const std::string streamed = stream_decode(tokenizer, c.ids, skip, pieces_valid);
      if (streamed != (skip ? c.decode_skip : c.decode)) {
        report(c, std::string("incremental decode") + (skip ? "(skip)" : "") + " = " + quoted(streamed));
      }
      if (!pieces_valid) report(c, "incremental decode emitted invalid UTF-8");
    }
  }
  std::printf("[ oracle   ] %s: %zu encode cases, %zu decode-only cases, %zu failures\n", name.c_str(), num_encode,
              num_decode_only, failures);
  EXPECT_EQ(failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerOracleTest,
                         ::testing::Values("qwen3", "deepseek_v3", "gpt_oss", "synthetic_llama", "synthetic_metaspace",
                                           "synthetic_metaspace_always", "synthetic_gpt2"));

}  // namespace
}  // namespace moert::text
