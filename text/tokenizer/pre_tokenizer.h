// Pre-tokenizers of tokenizer.json (docs/tokenizer.md, "Pipeline"): they cut the normalized text into
// pieces that the model tokenizes independently. A Sequence is stored flattened (each step runs on
// every piece the previous one produced, as a nested Sequence does).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/regex.h"

namespace moert::text {

// One piece of the input on its way to token ids.
// Invariant: text is non-empty valid UTF-8; a piece with token_id >= 0 (an added token) is final
// and no later stage looks at its text.
struct Piece {
  std::string text;
  int32_t token_id = -1;
  // Bytes at the start of `text` that Hugging Face aligns with offset 0 of the original input
  // (see NormalizedText::origin_bytes); 0 for a piece that does not start the input.
  size_t origin_bytes = 0;
};

// origin_bytes of the part of a piece that starts `offset` bytes into it and is `length` long.
inline size_t origin_after(size_t origin_bytes, size_t offset, size_t length) {
  return origin_bytes > offset ? std::min(origin_bytes - offset, length) : 0;
}

// How a Split treats the matches of its pattern (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// When Metaspace adds its replacement character in front of a piece.
enum class PrependScheme { kAlways, kFirst, kNever };

// GPT-2's pre-tokenization regex, used by ByteLevel with use_regex (Oniguruma syntax).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits };
  Kind kind = Kind::kSplit;
  // kSplit: the pattern (a literal is an escaped Regex); kByteLevel: GPT-2's regex if use_regex.
  std::optional<Regex> pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;  // kSplit
  bool invert = false;                                // kSplit: matches and gaps swap roles
  bool add_prefix_space = false;                      // kByteLevel: " " in front of each piece
  char32_t replacement = U'\u2581';                   // kMetaspace
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  bool split = true;                                  // kMetaspace: split before each replacement
  bool individual_digits = false;                     // kDigits
};

// Runs the steps over the pieces that are still text. Empty pieces are dropped after each step.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces);

// ---- Splitting machinery (shared with the added-token and decoder code) -------------------------
struct SplitMatch {
  size_t start = 0;
  size_t end = 0;  // exclusive
  bool is_match = false;
};
// The text cut at the regex's matches into alternating gap/match spans covering all of it
// (Hugging Face's Pattern::find_matches); for "" a single empty gap.
std::vector<SplitMatch> find_split_matches(const Regex& pattern, std::string_view text);
// The spans a Split with `behavior` keeps, in order (possibly empty spans; callers drop them).
std::vector<ByteSpan> apply_split_behavior(const std::vector<SplitMatch>& matches, SplitBehavior behavior);

}  // namespace moert::text
