// Added tokens (tokenizer.json "added_tokens"; docs/tokenizer.md, "Added tokens"): strings found in
// the input before any other processing and turned into their ids directly.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/pre_tokenizer.h"

namespace moert::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;  // only matched where no word character touches it on either side
  bool lstrip = false;       // also swallows the whitespace before it
  bool rstrip = false;       // also swallows the whitespace after it
  bool normalized = false;   // matched in the normalized text (else in the raw input)
  bool special = false;      // skipped by decode(skip_special_tokens = true)
};

// Leftmost-longest search over a fixed set of strings (Aho-Corasick's MatchKind::LeftmostLongest,
// done with a byte trie walked from each candidate start).
class LeftmostLongestMatcher {
 public:
  struct Match {
    size_t start = 0;
    size_t end = 0;
    size_t pattern = 0;  // index into the patterns given to the constructor
  };
  LeftmostLongestMatcher() = default;
  // Precondition: no pattern is empty. For duplicate patterns the last one wins.
  explicit LeftmostLongestMatcher(const std::vector<std::string>& patterns);
  bool empty() const { return nodes_.size() <= 1; }
  // The match with the smallest start >= from, the longest among those.
  std::optional<Match> find(std::string_view text, size_t from) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t pattern = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_byte_{};  // bytes some pattern starts with
};

// Splits one text piece at the added tokens of one pass (Hugging Face's
// AddedVocabulary::find_matches) and appends the parts to `out`: matches are taken leftmost-longest;
// a single_word match with a word character right before or after it is skipped; lstrip/rstrip
// widen the match over adjacent whitespace (never back over the previous match). Matched stretches
// become pieces with token_id set; empty parts are dropped. `tokens[k]` is the token of the
// matcher's pattern k (its content, or its normalized content in the second pass).
void split_on_added_tokens(const LeftmostLongestMatcher& matcher, const std::vector<const AddedToken*>& tokens,
                           const Piece& piece, std::vector<Piece>& out);

}  // namespace moert::text
