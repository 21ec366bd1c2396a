// UTF-8 helpers of the chat template engine (docs/chat_template.md, "Values": strings are
// sequences of code points). Decoding is lenient: a byte that does not start a valid sequence is
// one code point of its own (U+FFFD where a value is needed), so any input is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moert::text::jinja {

// Decodes the code point at s[pos] and advances pos past it (at least one byte).
char32_t next_code_point(std::string_view s, size_t& pos);
void append_utf8(std::string& out, char32_t cp);
// Number of code points.
int64_t count_code_points(std::string_view s);
// Byte offsets of each code point's start, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);

// JavaScript's \s (docs/chat_template.md, "Whitespace control").
bool is_js_space(char32_t cp);
// Length in bytes of the whitespace code point starting at s[pos]; 0 when there is none.
size_t space_length_at(std::string_view s, size_t pos);
std::string_view trim_js_space(std::string_view s, bool left, bool right);

inline bool is_ascii_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
inline char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

}  // namespace moert::text::jinja
