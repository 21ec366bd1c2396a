#include "text/tokenizer/byte_level.h"

#include "text/tokenizer/unicode.h"

namespace moert::text {

std::string bytes_to_byte_level(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (const char byte : s) append_utf8(out, kByteLevelAlphabet.byte_to_char[static_cast<unsigned char>(byte)]);
  return out;
}

std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const char32_t c = next_codepoint(token, pos);
    const int byte = c < kByteLevelAlphabet.char_to_byte.size() ? kByteLevelAlphabet.char_to_byte[c] : -1;
    if (byte < 0) return std::string(token);
    out.push_back(static_cast<char>(byte));
  }
  return out;
}

}  // namespace moert::text
