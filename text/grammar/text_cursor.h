// A byte cursor over a constraint's text, shared by the hand-written parsers of GBNF (gbnf.cpp)
// and regular expressions (regex.cpp): peeking and consuming bytes, errors that name the byte
// offset, and what both syntaxes spell the same way (repetition bounds, hex digits).
//
// The parsers derive from it and move `pos_` themselves; `pos_ <= text_.size()` always holds
// (every advance follows a peek of a byte that exists).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace moert::grammar {

class TextCursor {
 protected:
  // Repetition bounds above this are refused (a bounded repetition expands into copies).
  static constexpr int kMaxRepeatBound = 100000;

  // `what` names the text in errors: "<what> offset <pos>: <message>".
  TextCursor(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  bool at_end() const { return pos_ >= text_.size(); }
  // The byte `ahead` past the cursor, '\0' past the end.
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  // Consumes `s` when the text continues with it.
  bool consume(std::string_view s);
  Status error(const std::string& message) const;
  // The rest of `{m}`, `{m,}` or `{m,n}` after its '{', closing brace included: {min, max}, max
  // -1 when unbounded. Errors name `noun` ("repetition" in GBNF, "quantifier" in a regex).
  Result<std::pair<int, int>> parse_repeat_bounds(std::string_view noun);
  // `digits` hex digits of either case, as a number.
  Result<uint32_t> parse_hex(int digits);

  std::string_view text_;
  size_t pos_ = 0;

 private:
  Result<int> parse_bound(std::string_view noun);

  std::string_view what_;
};

}  // namespace moert::grammar
