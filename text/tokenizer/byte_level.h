// GPT-2's byte-to-unicode map (docs/tokenizer.md, "Byte-level alphabet"): byte-level BPE vocabularies
// spell every byte as one printable character. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for
// themselves (as code points); the other 68 bytes, in increasing order, become U+0100 + n
// (0x00 -> U+0100, ..., 0x20 (space) -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ', ..., 0xAD -> U+0143).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moert::text {

struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_char{};
  // Indexed by code point below 0x144; -1 where the code point is no byte's character.
  std::array<int16_t, 0x144> char_to_byte{};
};

constexpr ByteLevelAlphabet make_byte_level_alphabet() {
  ByteLevelAlphabet alphabet;
  alphabet.char_to_byte.fill(-1);
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next_extra++);
    alphabet.byte_to_char[b] = c;
    alphabet.char_to_byte[c] = static_cast<int16_t>(b);
  }
  return alphabet;
}

inline constexpr ByteLevelAlphabet kByteLevelAlphabet = make_byte_level_alphabet();

// Each byte of `s` replaced by its character (the ByteLevel pre-tokenizer's transform).
std::string bytes_to_byte_level(std::string_view s);
// Inverse of bytes_to_byte_level for one token (the ByteLevel decoder): the token's bytes if every
// character of `token` is in the alphabet, else the token's own UTF-8 bytes unchanged.
// Precondition: token is valid UTF-8.
std::string byte_level_to_bytes(std::string_view token);

}  // namespace moert::text
