// UTF-8 and Unicode helpers of the tokenizer (docs/tokenizer.md, "Unicode").
// All functions are pure. Strings are UTF-8 byte strings; unless a function says otherwise its input
// must be valid UTF-8 (Tokenizer::encode repairs its input once, up front, with to_valid_utf8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace moert::text {

struct CodepointRange {
  char32_t first = 0;
  char32_t last = 0;  // inclusive
};

// ---- UTF-8 ---------------------------------------------------------------------------------------
// Decodes the scalar value starting at s[pos] and advances pos past it.
// Precondition: s is valid UTF-8 and pos < s.size() is a character boundary.
char32_t next_codepoint(std::string_view s, size_t& pos);
void append_utf8(std::string& out, char32_t codepoint);
bool is_valid_utf8(std::string_view s);

// One step of the "substitution of maximal subparts" practice (Unicode ch. 3, U+FFFD; what Rust's
// String::from_utf8_lossy does): at bytes[0] there is either a complete valid character, a maximal
// ill-formed subpart (replaced by one U+FFFD), or a valid but truncated prefix of a character.
struct Utf8Step {
  enum class Kind { kValid, kInvalid, kTruncated };
  Kind kind;
  size_t length;  // bytes consumed (kValid, kInvalid); bytes available (kTruncated)
};
// Precondition: !bytes.empty().
Utf8Step utf8_step(std::string_view bytes);

// `bytes` with every maximal ill-formed subpart (including a truncated character at the end)
// replaced by U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

// Streaming to_valid_utf8: the concatenation of every append() and the final finish() equals
// to_valid_utf8 of the concatenated input, and each returned piece is valid UTF-8 (a truncated
// character is held back until it completes or finish() replaces it).
class Utf8Repairer {
 public:
  void append(std::string_view bytes, std::string& out);
  void finish(std::string& out);

 private:
  std::string pending_;  // a truncated prefix of one character, < 4 bytes
};

// ---- Character properties ------------------------------------------------------------------------
// The Unicode White_Space property (Rust's char::is_whitespace, regex \s of Rust and Oniguruma).
bool is_white_space(char32_t c);
// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t c);
// A word character as Rust regex's Unicode \w sees it (Alphabetic, marks, Nd, Pc, Join_Control),
// approximated from general categories (docs/tokenizer.md, "Unicode").
bool is_word_char(char32_t c);

// Code points Oniguruma includes in a class beyond PCRE2's own tables (unicode_classes.cpp).
// class_name: a general category short name ("L", "Lu", "N", ...), or "\\s", "\\w", "\\d".
std::span<const CodepointRange> onig_class_extras(std::string_view class_name);
bool in_ranges(std::span<const CodepointRange> ranges, char32_t c);
// Code points Hugging Face's normalizers leave alone although current Unicode (and utf8proc)
// decomposes, reorders or composes them (unicode_tables.cpp).
std::span<const CodepointRange> hf_normalization_inert();
// Lowercase mappings newer than utf8proc's tables (unicode_tables.cpp), or nullopt.
std::optional<char32_t> lowercase_override(char32_t c);

// ---- Transformations -----------------------------------------------------------------------------
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization as Hugging Face's normalizers do it: utf8proc, except that the code points
// of hf_normalization_inert() stay as they are (plain starters) and are never composed into.
// Throws std::runtime_error if utf8proc rejects the input.
std::string normalize_unicode(std::string_view s, NormalForm form);
// Per-character full lowercase mapping (Rust's char::to_lowercase, no context such as final sigma):
// utf8proc's simple mapping, U+0130 -> "i\u0307", and lowercase_override().
std::string to_lowercase(std::string_view s);

}  // namespace moert::text
