// The loaded pipeline behind Tokenizer (internal to text/tokenizer).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "text/tokenizer/added_vocabulary.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/decoder.h"
#include "text/tokenizer/normalizer.h"
#include "text/tokenizer/pre_tokenizer.h"

namespace moert::text {

// Invariant: built once by parse_tokenizer_json and never modified afterwards (the matcher token
// lists point into added_by_id).
struct TokenizerData {
  std::vector<NormalizerStep> normalizer;
  bool has_normalizer = false;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::optional<BpeModel> model;  // always set once loaded
  std::vector<DecoderStep> decoder;
  bool has_decoder = false;

  // Added tokens by their (re)assigned id, and the string decode sees for each: the content, or
  // its normalized form for normalized tokens whose normalization changes it (Hugging Face's
  // normalized_cache).
  std::map<int32_t, AddedToken> added_by_id;
  std::map<int32_t, std::string> added_decode_text;
  Vocabulary added_by_content;
  std::unordered_set<std::string, StringViewHash, std::equal_to<>> special_contents;
  // Pass 1 matches non-normalized added tokens in the raw input; pass 2 matches normalized ones
  // (by their normalized content) in each normalized stretch.
  LeftmostLongestMatcher raw_matcher;
  std::vector<const AddedToken*> raw_tokens;
  LeftmostLongestMatcher normalized_matcher;
  std::vector<const AddedToken*> normalized_tokens;

  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  int32_t vocab_size = 0;

  // The token string of an id as decode sees it, or nullptr.
  const std::string* token_string(int32_t id) const;
};

// Builds the pipeline from the text of tokenizer.json and of tokenizer_config.json (may be empty).
// Throws std::runtime_error("tokenizer: <file name>: <where in the JSON>: <what>").
void parse_tokenizer_json(std::string_view tokenizer_json, std::string_view tokenizer_name,
                          std::string_view config_json, std::string_view config_name, TokenizerData& data);

}  // namespace moert::text
