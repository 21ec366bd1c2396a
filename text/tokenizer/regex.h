// Regular expressions of tokenizer.json (docs/tokenizer.md, "Regular expressions"). Hugging Face
// `tokenizers` compiles them with Oniguruma (Ruby syntax); here they are translated to PCRE2 (UTF and
// UCP mode) so that the classes they use match the same code points.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;  // pcre2_code; pcre2.h stays out of this header

namespace moert::text {

struct ByteSpan {
  size_t start = 0;
  size_t end = 0;  // exclusive
};

// The PCRE2 pattern equivalent to an Oniguruma (Ruby syntax) pattern: \s, \w, \d, \h and
// general-category properties (\p{L}, \p{Lu}, ...; also \P and \p{^...}) become classes holding
// Oniguruma's code points, \uHHHH becomes \x{HHHH}, {,n} becomes {0,n}, and the inline option m
// (Ruby: dot matches newline) becomes s. Throws std::invalid_argument for syntax PCRE2 lacks
// (nested classes, class intersection &&).
std::string translate_onig_pattern(std::string_view pattern);

// Immutable compiled pattern; copies share it and it may be used from several threads at once.
class Regex {
 public:
  // An Oniguruma pattern (translated as above). Throws std::invalid_argument naming the pattern
  // and PCRE2's message when it does not compile.
  static Regex from_onig(std::string_view pattern);
  // A pattern matching `text` literally.
  static Regex literal(std::string_view text);

  // Every non-overlapping match, leftmost first, as Oniguruma's find_iter reports them: after a
  // match ending at e the search resumes at e, and an empty match at the end of the previous match
  // is skipped (the search moves on one character). Precondition: subject is valid UTF-8.
  // Throws std::runtime_error if PCRE2 gives up (match or depth limit).
  std::vector<ByteSpan> find_all(std::string_view subject) const;

 private:
  std::shared_ptr<pcre2_real_code_8> code_;
  std::string pattern_;  // for error messages
};

}  // namespace moert::text
