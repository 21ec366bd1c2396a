// The BPE model of tokenizer.json (docs/tokenizer.md, "BPE"): a vocabulary and ranked merges that
// turn one pre-tokenized piece into token ids.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moert::text {

struct BpeOptions {
  std::optional<std::string> unk_token;                  // id for characters not in the vocabulary
  std::optional<std::string> continuing_subword_prefix;  // spelled before every non-first character
  std::optional<std::string> end_of_word_suffix;         // spelled after the last character
  bool fuse_unk = false;       // consecutive unknown characters share one unk id
  bool byte_fallback = false;  // unknown characters become their bytes' "<0xNN>" tokens
  bool ignore_merges = false;  // a piece that is itself in the vocabulary is one token
};

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocabulary = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

class BpeModel {
 public:
  // merges: (left, right) in rank order (rank = index); a later duplicate pair replaces an earlier
  // one, as in Hugging Face. Throws std::invalid_argument naming the first merge whose parts or
  // result are not in the vocabulary, and for negative ids.
  BpeModel(Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of one piece. Throws std::runtime_error if the piece needs an unk_token that
  // is not in the vocabulary.
  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr if the id is not in the vocabulary
  size_t num_entries() const { return vocab_.size(); }
  int32_t max_id() const { return max_id_; }  // -1 for an empty vocabulary

 private:
  struct Merge {
    uint32_t rank = 0;
    int32_t new_id = 0;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  Vocabulary vocab_;
  std::unordered_map<int32_t, std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  int32_t max_id_ = -1;
};

}  // namespace moert::text
