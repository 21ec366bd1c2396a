// Normalizers of tokenizer.json (docs/tokenizer.md, "Pipeline"): applied to each stretch of input
// text between added tokens, before pre-tokenization. A Sequence is stored flattened: its steps run
// in order on the whole stretch, which is what a nested Sequence does too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/regex.h"

namespace moert::text {

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
  Kind kind = Kind::kNfc;
  std::optional<Regex> pattern;  // kReplace: what to replace (a literal is an escaped Regex)
  std::string content;           // kReplace: the replacement; kPrepend: the prefix
  bool strip_left = false;       // kStrip
  bool strip_right = false;      // kStrip
};

struct NormalizedText {
  std::string text;
  // Bytes at the start of `text` that Hugging Face aligns with offset 0 of the original input:
  // the characters made from the input's first character (an NFKC expansion, a lowercase mapping)
  // and any prepended in front of them. 0 when the stretch does not start the input or
  // normalization removed that character (Strip, or a Replace with empty content). This is what
  // Metaspace's prepend_scheme "first" looks at (docs/tokenizer.md, "Offsets").
  size_t origin_bytes = 0;
};

// Applies the steps in order. `origin_bytes`: as above, for `text` before normalization.
// Precondition: text is valid UTF-8.
NormalizedText normalize(const std::vector<NormalizerStep>& steps, std::string_view text, size_t origin_bytes);

}  // namespace moert::text
