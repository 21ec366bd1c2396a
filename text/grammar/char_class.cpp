#include "text/grammar/char_class.h"

#include <algorithm>

namespace moert::grammar {

CodepointRanges normalize(CodepointRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodepointRanges complement(const CodepointRanges& ranges) {
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [first, last] : ranges) {
    if (first > next) out.push_back({next, first - 1});
    next = last + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

Result<uint32_t> decode_utf8(std::string_view text, size_t* pos) {
  const size_t start = *pos;
  const auto bad = [&] { return invalid_argument("malformed UTF-8 at byte " + std::to_string(start)); };
  const unsigned char c = static_cast<unsigned char>(text[start]);
  int extra = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    cp = c;
  } else if ((c & 0xE0) == 0xC0) {
    extra = 1;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    extra = 2;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    extra = 3;
    cp = c & 0x07;
  } else {
    return bad();
  }
  if (start + static_cast<size_t>(extra) >= text.size()) return bad();
  for (int i = 1; i <= extra; ++i) {
    const unsigned char d = static_cast<unsigned char>(text[start + static_cast<size_t>(i)]);
    if ((d & 0xC0) != 0x80) return bad();
    cp = (cp << 6) | (d & 0x3F);
  }
  *pos = start + 1 + static_cast<size_t>(extra);
  return cp;
}

}  // namespace moert::grammar
