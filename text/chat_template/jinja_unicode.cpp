#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja {

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  int length = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    ++pos;
    return lead;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, cp = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, cp = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  }
  if (length == 0 || pos + static_cast<size_t>(length) > s.size()) {
    ++pos;
    return 0xFFFD;
  }
  for (int i = 1; i < length; ++i) {
    const unsigned char c = byte(pos + static_cast<size_t>(i));
    if ((c & 0xC0) != 0x80) {
      ++pos;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++pos;
    return 0xFFFD;
  }
  pos += static_cast<size_t>(length);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // lone surrogates are not encodable
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int64_t count_code_points(std::string_view s) {
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) next_code_point(s, pos);
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    next_code_point(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_js_space(char32_t cp) {
  switch (cp) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t space_length_at(std::string_view s, size_t pos) {
  size_t next = pos;
  const char32_t cp = next_code_point(s, next);
  return is_js_space(cp) && !(cp == 0xFFFD) ? next - pos : 0;
}

std::string_view trim_js_space(std::string_view s, bool left, bool right) {
  size_t begin = 0;
  if (left) {
    while (begin < s.size()) {
      const size_t n = space_length_at(s, begin);
      if (n == 0) break;
      begin += n;
    }
  }
  size_t end = s.size();
  if (right) {
    while (end > begin) {
      // Step back to the start of the previous code point (at most 4 bytes).
      size_t start = end - 1;
      while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (space_length_at(s, start) != end - start) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

}  // namespace moert::text::jinja
