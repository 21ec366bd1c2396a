// Tokenizer behaviour beyond the oracle files: errors for bad files, API facts, streaming pieces.
#include <gtest/gtest.h>

#include <filesystem>
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

// A minimal valid tokenizer.json: byte-level BPE over "a", "b", "ab".
nlohmann::json minimal_json() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
    "trim_offsets": true, "use_regex": true}, "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]}})");
}

// Loading `json` must throw std::runtime_error whose message contains every one of `parts`.
void expect_load_error(const std::string& json_text, const std::vector<std::string>& parts) {
  try {
    Tokenizer::from_json(json_text, {}, "bad/tokenizer.json");
    ADD_FAILURE() << "no error for " << json_text;
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message \"" << message << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(TokenizerTest, MinimalTokenizerWorks) {
  const Tokenizer tokenizer = Tokenizer::from_json(minimal_json().dump());
  EXPECT_EQ(tokenizer.encode("ab a"), (std::vector<int32_t>{2, 3, 0}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{2, 3, 0}, false), "ab a");
  EXPECT_EQ(tokenizer.vocab_size(), 4);
}

TEST(TokenizerTest, MalformedFilesGiveOneClearError) {
  expect_load_error("{\"model\": ", {"bad/tokenizer.json", "not valid JSON"});
  expect_load_error("[1, 2]", {"bad/tokenizer.json", "expected an object"});
  expect_load_error(std::string(100, '[') + std::string(100, ']'), {"bad/tokenizer.json", "nested deeper"});
  expect_load_error(R"({"version": "1.0", "version": "1.0"})", {"bad/tokenizer.json", "duplicate key 'version'"});

  nlohmann::json j = minimal_json();
  j.erase("model");
  expect_load_error(j.dump(), {"bad/tokenizer.json", "model", "missing"});

  j = minimal_json();
  j["model"]["type"] = "Unigram";
  expect_load_error(j.dump(), {"bad/tokenizer.json", "model", "unsupported model type \"Unigram\""});

  j = minimal_json();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
  expect_load_error(j.dump(),
                    {"bad/tokenizer.json", "normalizer.normalizers[1]", "unsupported normalizer type \"Precompiled\""});

  j = minimal_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(j.dump(), {"bad/tokenizer.json", "pre_tokenizer", "unsupported pre_tokenizer type \"Whitespace\""});

  j = minimal_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(j.dump(), {"bad/tokenizer.json", "decoder", "unsupported decoder type \"WordPiece\""});

  j = minimal_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}, {"invert", false}};
  expect_load_error(j.dump(), {"bad/tokenizer.json", "pre_tokenizer.pattern", "(a", "does not compile"});

  j = minimal_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}, {"invert", false}};
  expect_load_error(j.dump(), {"pre_tokenizer.behavior", "Sideways"});

  j = minimal_json();
  j["model"]["merges"] = {"a c"};
  expect_load_error(j.dump(), {"bad/tokenizer.json", "model", "merge 0", "\"c\"", "not in the vocabulary"});

  j = minimal_json();
  j["model"]["merges"] = {"a b c"};
  expect_load_error(j.dump(), {"model.merges[0]", "a b c"});

  j = minimal_json();
  j["model"]["vocab"]["x"] = "seven";
  expect_load_error(j.dump(), {"model.vocab", "\"x\""});

  j = minimal_json();
  j["added_tokens"] = {{{"id", 9}, {"special", true}}};
  expect_load_error(j.dump(), {"added_tokens[0].content", "missing"});

  j = minimal_json();
  j["version"] = "2.0";
  expect_load_error(j.dump(), {"version"});

  j = minimal_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  expect_load_error(j.dump(), {"pre_tokenizer.replacement", "one character"});
}

TEST(TokenizerTest, MissingDirectoryNamesTheFile) {
  try {
    Tokenizer::load("no/such/checkpoint");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(TokenizerTest, ConfigGivesBosAndEos) {
  EXPECT_EQ(cached_tokenizer("qwen3").eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(cached_tokenizer("qwen3").bos_id(), std::nullopt);
  EXPECT_EQ(cached_tokenizer("deepseek_v3").bos_id(), 0);  // <｜begin▁of▁sentence｜>
  EXPECT_EQ(cached_tokenizer("deepseek_v3").eos_id(), 1);
  EXPECT_EQ(cached_tokenizer("gpt_oss").bos_id(), 199998);  // <|startoftext|>
  EXPECT_EQ(cached_tokenizer("gpt_oss").eos_id(), 200002);  // <|return|>
}

TEST(TokenizerTest, VocabularyFacts) {
  const Tokenizer& qwen = cached_tokenizer("qwen3");
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_EQ(qwen.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.id_to_token(151644), "<|im_start|>");
  EXPECT_TRUE(qwen.is_special(151644));
  EXPECT_FALSE(qwen.is_special(151667));  // <think> is an added token but not special
  EXPECT_FALSE(qwen.is_special(9707));
  EXPECT_EQ(qwen.token_to_id("Hello"), 9707);
  EXPECT_EQ(qwen.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(qwen.id_to_token(-1), std::nullopt);
  EXPECT_EQ(qwen.id_to_token(1000000), std::nullopt);
  EXPECT_EQ(cached_tokenizer("deepseek_v3").vocab_size(), 128815);
  EXPECT_EQ(cached_tokenizer("gpt_oss").vocab_size(), 200019);
}

TEST(TokenizerTest, InvalidUtf8InputIsRepairedFirst) {
  const Tokenizer& qwen = cached_tokenizer("qwen3");
  EXPECT_EQ(qwen.encode("x\xFF y\xE4\xBD"), qwen.encode("x\xEF\xBF\xBD y\xEF\xBF\xBD"));
  EXPECT_TRUE(qwen.encode("").empty());
}

TEST(TokenizerTest, DecodeSkipsUnknownIds) {
  const Tokenizer& qwen = cached_tokenizer("qwen3");
  EXPECT_EQ(qwen.decode(std::vector<int32_t>{9707, -5, 10000000, 1879}, false), "Hello world");
}

TEST(IncrementalDecoderTest, HoldsBackIncompleteCharacters) {
  const Tokenizer& qwen = cached_tokenizer("qwen3");
  // "🙂" is several byte-level tokens; nothing is emitted until its last byte arrives.
  const std::vector<int32_t> ids = qwen.encode("a🙂b");
  ASSERT_GE(ids.size(), 3u);
  IncrementalDecoder decoder(qwen, false);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(decoder.push(id));
  pieces.push_back(decoder.finish());
  std::string joined;
  for (const std::string& piece : pieces) {
    EXPECT_TRUE(is_valid_utf8(piece));
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    joined += piece;
  }
  EXPECT_EQ(joined, "a🙂b");
  EXPECT_EQ(pieces.front(), "a");

  // A stream cut inside a character: the held bytes become U+FFFD only at finish().
  IncrementalDecoder cut(qwen, false);
  std::string text;
  for (size_t i = 0; i + 2 < ids.size(); ++i) text += cut.push(ids[i]);
  EXPECT_TRUE(is_valid_utf8(text));
  text += cut.finish();
  EXPECT_EQ(text, qwen.decode(std::span(ids).first(ids.size() - 2), false));
}

TEST(IncrementalDecoderTest, LongGenerationMatchesWholeDecode) {
  for (const std::string name : {"qwen3", "deepseek_v3", "gpt_oss", "synthetic_llama", "synthetic_metaspace"}) {
    const Tokenizer& tokenizer = cached_tokenizer(name);
    std::vector<int32_t> ids;
    // A pseudo-random walk over the whole vocabulary, specials and out-of-range ids included.
    uint64_t state = 12345;
    for (int i = 0; i < 3000; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      ids.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(tokenizer.vocab_size() + 10)));
    }
    for (const bool skip : {false, true}) {
      IncrementalDecoder decoder(tokenizer, skip);
      std::string text;
      for (const int32_t id : ids) {
        const std::string piece = decoder.push(id);
        ASSERT_TRUE(is_valid_utf8(piece)) << name;
        text += piece;
      }
      text += decoder.finish();
      EXPECT_EQ(text, tokenizer.decode(ids, skip)) << name;
    }
  }
}

// Decoder Strip with stop > 0 (no oracle line: the Rust library panics on empty tokens there).
TEST(DecoderTest, StripRemovesLeadingAndTrailingCharacters) {
  nlohmann::json j = minimal_json();
  j["pre_tokenizer"] = nullptr;
  j["model"]["vocab"] = {{"x", 0}, {"a", 1}, {"xxa", 2}, {"axx", 3}};
  j["model"]["merges"] = nlohmann::json::array();
  j["decoder"] = {{"type", "Strip"}, {"content", "x"}, {"start", 1}, {"stop", 2}};
  const Tokenizer per_token = Tokenizer::from_json(j.dump());
  // Per token: "xxa" -> "xa", "axx" -> "a", "a" -> "a".
  EXPECT_EQ(per_token.decode(std::vector<int32_t>{2, 3, 1}, false), "xaaa");

  // After Fuse the whole text is one token, streamed: the trailing "xx" is held back, then dropped.
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", "x"}, {"start", 1}, {"stop", 2}}}}};
  const Tokenizer fused = Tokenizer::from_json(j.dump());
  const std::vector<int32_t> ids = {2, 0, 1, 0, 0, 0};  // "xxa" "x" "a" "x" "x" "x"
  EXPECT_EQ(fused.decode(ids, false), "xaxax");
  IncrementalDecoder decoder(fused, false);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(decoder.push(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"xa", "", "xa", "", "", "x"}));
  EXPECT_EQ(decoder.finish(), "");
}

}  // namespace
}  // namespace moert::text
