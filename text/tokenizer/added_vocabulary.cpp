#include "text/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "text/tokenizer/unicode.h"

namespace moert::text {

LeftmostLongestMatcher::LeftmostLongestMatcher(const std::vector<std::string>& patterns) {
  for (size_t k = 0; k < patterns.size(); ++k) {
    int32_t node = 0;
    for (const char c : patterns[k]) {
      const auto byte = static_cast<unsigned char>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
                        {byte, next});
      }
      node = next;
    }
    nodes_[node].pattern = static_cast<int32_t>(k);
    if (!patterns[k].empty()) first_byte_[static_cast<unsigned char>(patterns[k][0])] = true;
  }
}

int32_t LeftmostLongestMatcher::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

std::optional<LeftmostLongestMatcher::Match> LeftmostLongestMatcher::find(std::string_view text, size_t from) const {
  if (empty()) return std::nullopt;
  for (size_t start = from; start < text.size(); ++start) {
    if (!first_byte_[static_cast<unsigned char>(text[start])]) continue;
    std::optional<Match> longest;
    int32_t node = 0;
    for (size_t i = start; i < text.size(); ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
      if (nodes_[node].pattern >= 0) longest = Match{start, i + 1, static_cast<size_t>(nodes_[node].pattern)};
    }
    if (longest) return longest;
  }
  return std::nullopt;
}

namespace {

// The last character of text[0, end) is a word character (Rust regex \w$ on that prefix).
bool ends_with_word(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return is_word_char(next_codepoint(text, start));
}

bool starts_with_word(std::string_view text, size_t start) {
  if (start >= text.size()) return false;
  return is_word_char(next_codepoint(text, start));
}

// Start of the whitespace run that ends at `end`.
size_t whitespace_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!is_white_space(next_codepoint(text, probe))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `start`.
size_t whitespace_run_end(std::string_view text, size_t start) {
  while (start < text.size()) {
    size_t next = start;
    if (!is_white_space(next_codepoint(text, next))) break;
    start = next;
  }
  return start;
}

}  // namespace

void split_on_added_tokens(const LeftmostLongestMatcher& matcher, const std::vector<const AddedToken*>& tokens,
                           const Piece& piece, std::vector<Piece>& out) {
  const std::string_view text = piece.text;
  auto emit_gap = [&](size_t start, size_t end) {
    if (end > start) {
      out.push_back(
          {std::string(text.substr(start, end - start)), -1, origin_after(piece.origin_bytes, start, end - start)});
    }
  };
  size_t consumed = 0;  // end of the previous emitted part
  size_t search_from = 0;
  while (const auto match = matcher.find(text, search_from)) {
    search_from = match->end;  // the matcher never re-reads a match, even one skipped below
    const AddedToken& token = *tokens[match->pattern];
    size_t start = match->start, stop = match->end;
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word(text, start);
      const bool space_after = stop == text.size() || !starts_with_word(text, stop);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(whitespace_run_start(text, start), consumed);
    if (token.rstrip) stop = whitespace_run_end(text, stop);
    if (consumed < start) emit_gap(consumed, start);
    if (stop > start) out.push_back({std::string(text.substr(start, stop - start)), token.id, 0});
    consumed = stop;
  }
  if (consumed < text.size()) emit_gap(consumed, text.size());
}

}  // namespace moert::text
