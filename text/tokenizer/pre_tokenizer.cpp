#include "text/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {

std::vector<SplitMatch> find_split_matches(const Regex& pattern, std::string_view text) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<SplitMatch> out;
  size_t previous = 0;
  for (const ByteSpan& match : pattern.find_all(text)) {
    if (previous != match.start) out.push_back({previous, match.start, false});
    out.push_back({match.start, match.end, true});
    previous = match.end;
  }
  if (previous != text.size()) out.push_back({previous, text.size(), false});
  return out;
}

namespace {

// Each character satisfying `pred` is a match of its own (Hugging Face's Pattern for Fn(char)).
template <typename Pred>
std::vector<SplitMatch> find_char_matches(std::string_view text, Pred pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<SplitMatch> out;
  size_t gap_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    if (pred(next_codepoint(text, pos))) {
      if (gap_start < start) out.push_back({gap_start, start, false});
      out.push_back({start, pos, true});
      gap_start = pos;
    }
  }
  if (gap_start < text.size()) out.push_back({gap_start, text.size(), false});
  return out;
}

// Replaces `piece` (a text piece) by the kept spans of its text, dropping empty ones.
void emit_spans(size_t origin_bytes, const std::string& text, const std::vector<ByteSpan>& spans,
                std::vector<Piece>& out) {
  for (const ByteSpan& span : spans) {
    if (span.end <= span.start) continue;
    const size_t length = span.end - span.start;
    out.push_back({text.substr(span.start, length), -1, origin_after(origin_bytes, span.start, length)});
  }
}

std::string replace_char(std::string_view text, char32_t from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    if (next_codepoint(text, pos) == from) {
      out.append(to);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

bool starts_with_char(std::string_view text, char32_t c) {
  if (text.empty()) return false;
  size_t pos = 0;
  return next_codepoint(text, pos) == c;
}

void run_step(const PreTokenizerStep& step, const Piece& piece, std::vector<Piece>& out) {
  switch (step.kind) {
    case PreTokenizerStep::Kind::kSplit: {
      std::vector<SplitMatch> matches = find_split_matches(*step.pattern, piece.text);
      if (step.invert) {
        for (SplitMatch& m : matches) m.is_match = !m.is_match;
      }
      emit_spans(piece.origin_bytes, piece.text, apply_split_behavior(matches, step.behavior), out);
      return;
    }
    case PreTokenizerStep::Kind::kByteLevel: {
      std::string text = piece.text;
      size_t origin = piece.origin_bytes;
      if (step.add_prefix_space && text.front() != ' ') {
        text.insert(text.begin(), ' ');
        if (origin > 0) ++origin;  // the space aligns with the first character
      }
      std::vector<Piece> parts;
      if (step.pattern) {
        emit_spans(origin, text,
                   apply_split_behavior(find_split_matches(*step.pattern, text), SplitBehavior::kIsolated), parts);
      } else {
        parts.push_back({std::move(text), -1, origin});
      }
      for (Piece& part : parts) {
        part.origin_bytes = bytes_to_byte_level(std::string_view(part.text).substr(0, part.origin_bytes)).size();
        part.text = bytes_to_byte_level(part.text);
        out.push_back(std::move(part));
      }
      return;
    }
    case PreTokenizerStep::Kind::kMetaspace: {
      std::string replacement;
      append_utf8(replacement, step.replacement);
      std::string text = replace_char(piece.text, U' ', replacement);
      size_t origin =
          replace_char(std::string_view(piece.text).substr(0, piece.origin_bytes), U' ', replacement).size();
      // "first": only where Hugging Face's offsets put the piece at the start of the input.
      const bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                           (step.prepend_scheme == PrependScheme::kFirst && origin > 0);
      if (prepend && !starts_with_char(text, step.replacement)) {
        text = replacement + text;
        if (origin > 0) origin += replacement.size();
      }
      if (!step.split) {
        out.push_back({std::move(text), -1, origin});
        return;
      }
      const char32_t r = step.replacement;
      emit_spans(origin, text,
                 apply_split_behavior(find_char_matches(text, [r](char32_t c) { return c == r; }),
                                      SplitBehavior::kMergedWithNext),
                 out);
      return;
    }
    case PreTokenizerStep::Kind::kDigits: {
      emit_spans(piece.origin_bytes, piece.text,
                 apply_split_behavior(find_char_matches(piece.text, is_numeric),
                                      step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous),
                 out);
      return;
    }
  }
}

}  // namespace

std::vector<ByteSpan> apply_split_behavior(const std::vector<SplitMatch>& matches, SplitBehavior behavior) {
  std::vector<ByteSpan> spans;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const SplitMatch& m : matches) spans.push_back({m.start, m.end});
      break;
    case SplitBehavior::kRemoved:
      for (const SplitMatch& m : matches) {
        if (!m.is_match) spans.push_back({m.start, m.end});
      }
      break;
    case SplitBehavior::kContiguous:
      // Runs of consecutive matches (or of consecutive gaps) become one span.
      for (const SplitMatch& m : matches) {
        if (m.is_match == previous_match && !spans.empty()) {
          spans.back().end = m.end;
        } else {
          spans.push_back({m.start, m.end});
        }
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const SplitMatch& m : matches) {
        if (m.is_match && !previous_match && !spans.empty()) {
          spans.back().end = m.end;
        } else {
          spans.push_back({m.start, m.end});
        }
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      // The same walk from the end: a match joins the span after it.
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !previous_match && !spans.empty()) {
          spans.back().start = it->start;
        } else {
          spans.push_back({it->start, it->end});
        }
        previous_match = it->is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
  }
  return spans;
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces) {
  for (const PreTokenizerStep& step : steps) {
    std::vector<Piece> next;
    next.reserve(pieces.size());
    for (Piece& piece : pieces) {
      if (piece.token_id >= 0) {
        next.push_back(std::move(piece));
      } else {
        run_step(step, piece, next);
      }
    }
    pieces = std::move(next);
  }
}

}  // namespace moert::text
