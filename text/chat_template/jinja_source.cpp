#include "text/chat_template/jinja_source.h"

#include <limits>

namespace moert::text::jinja {

namespace {
// JavaScript's multiline `^`: a line starts after \n, \r, U+2028 or U+2029.
bool starts_line(std::string_view s, size_t pos) {
  if (pos == 0) return true;
  if (s[pos - 1] == '\n' || s[pos - 1] == '\r') return true;
  return pos >= 3 && s.substr(pos - 3, 2) == "\xE2\x80" && (s[pos - 1] == '\xA8' || s[pos - 1] == '\xA9');
}
}  // namespace

SourceText SourceText::prepare(std::string_view source) {
  if (source.size() >= std::numeric_limits<uint32_t>::max()) {
    throw ChatTemplateError(ChatTemplateError::Kind::kSyntax, 1, 1, "the template is larger than 4 GiB");
  }
  SourceText out;
  out.original = std::string(source);
  std::string_view s = source;
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  out.text.reserve(s.size());
  out.origin.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    // lstrip_blocks: spaces and tabs from a line start up to `{%`, `{#` or `{-` go.
    if (starts_line(s, pos)) {
      size_t end = pos;
      while (end < s.size() && (s[end] == ' ' || s[end] == '\t')) ++end;
      if (end > pos && end + 1 < s.size() && s[end] == '{' && (s[end + 1] == '%' || s[end + 1] == '#' || s[end + 1] == '-')) {
        pos = end;
      }
    }
    // trim_blocks: the newline right after `%}`, `#}` or `-}` goes. The two characters before
    // it are never removed by lstrip, so looking at the original is the same as at the output.
    if (s[pos] == '\n' && pos >= 2 && s[pos - 1] == '}' && (s[pos - 2] == '%' || s[pos - 2] == '#' || s[pos - 2] == '-')) {
      ++pos;
      continue;
    }
    out.text += s[pos];
    out.origin.push_back(static_cast<uint32_t>(pos));
    ++pos;
  }
  out.origin.push_back(static_cast<uint32_t>(s.size()));
  return out;
}

void SourceText::locate(uint32_t offset, int& line, int& column) const {
  line = 1;
  column = 1;
  const size_t end = std::min<size_t>(offset, original.size());
  for (size_t i = 0; i < end; ++i) {
    const unsigned char c = static_cast<unsigned char>(original[i]);
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {  // not a UTF-8 continuation byte: a new code point
      ++column;
    }
  }
}

ChatTemplateError SourceText::error(ChatTemplateError::Kind kind, uint32_t offset, std::string detail) const {
  int line = 0;
  int column = 0;
  locate(offset, line, column);
  return ChatTemplateError(kind, line, column, std::move(detail));
}

}  // namespace moert::text::jinja
