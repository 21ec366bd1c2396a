#include "text/grammar/text_cursor.h"

namespace moert::grammar {

bool TextCursor::consume(std::string_view s) {
  if (text_.substr(pos_, s.size()) != s) return false;
  pos_ += s.size();
  return true;
}

Status TextCursor::error(const std::string& message) const {
  return invalid_argument(std::string(what_) + " offset " + std::to_string(pos_) + ": " + message);
}

Result<int> TextCursor::parse_bound(std::string_view noun) {
  const size_t start = pos_;
  int64_t v = 0;
  while (!at_end() && peek() >= '0' && peek() <= '9') {
    v = v * 10 + (peek() - '0');
    if (v > kMaxRepeatBound) return error(std::string(noun) + " bound over " + std::to_string(kMaxRepeatBound));
    ++pos_;
  }
  if (pos_ == start) return error("expected a number in a " + std::string(noun));
  return static_cast<int>(v);
}

Result<std::pair<int, int>> TextCursor::parse_repeat_bounds(std::string_view noun) {
  MOERT_ASSIGN_OR_RETURN(const int min, parse_bound(noun));
  int max = min;
  if (consume(",")) {
    max = -1;
    if (peek() != '}') {
      MOERT_ASSIGN_OR_RETURN(max, parse_bound(noun));
    }
  }
  if (!consume("}")) return error("expected '}' in a " + std::string(noun));
  if (max >= 0 && max < min) {
    return error(std::string(noun) + " {" + std::to_string(min) + "," + std::to_string(max) + "} has max < min");
  }
  return std::pair<int, int>{min, max};
}

Result<uint32_t> TextCursor::parse_hex(int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char h = peek();
    int d = -1;
    if (h >= '0' && h <= '9') d = h - '0';
    if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
    if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
    if (d < 0) return error("expected a hex digit");
    v = v * 16 + static_cast<uint32_t>(d);
    ++pos_;
  }
  return v;
}

}  // namespace moert::grammar
