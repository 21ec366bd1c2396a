// The template source and its textual whitespace rules (docs/chat_template.md, "Whitespace
// control"): one trailing newline dropped, lstrip_blocks and trim_blocks applied to the raw text
// as transformers configures Jinja. The result keeps, for every byte, the offset of the byte of
// the original source it came from, so that errors name the original line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template/chat_template.h"

namespace moert::text::jinja {

struct SourceText {
  std::string original;
  std::string text;              // after the whitespace rules; what the lexer reads
  std::vector<uint32_t> origin;  // origin[i]: offset in `original` of text[i]; one extra entry for the end

  static SourceText prepare(std::string_view source);

  // 1-based line and column (in code points) of an offset of the original source.
  void locate(uint32_t offset, int& line, int& column) const;
  ChatTemplateError error(ChatTemplateError::Kind kind, uint32_t offset, std::string detail) const;
};

}  // namespace moert::text::jinja
