#include "text/tokenizer/normalizer.h"

#include <algorithm>

#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

// Replaces every match; `origin` (bytes from the first original character) follows the text: a
// match inside the origin stretch shifts it, a match reaching past its end ends it after the
// replacement, and deleting the very first character leaves no origin at all.
std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content, size_t& origin) {
  if (text.empty()) return {};
  std::string out;
  size_t copied = 0;
  size_t new_origin = origin;
  bool origin_done = origin == 0;
  for (const ByteSpan& match : pattern.find_all(text)) {
    out.append(text.substr(copied, match.start - copied));
    if (!origin_done) {
      if (match.start >= origin) {
        origin_done = true;
      } else if (match.start == 0 && content.empty() && match.end > 0) {
        new_origin = 0;
        origin_done = true;
      } else if (match.end >= origin) {
        new_origin = out.size() + content.size();
        origin_done = true;
      } else {
        new_origin = new_origin + content.size() - (match.end - match.start);
      }
    }
    out.append(content);
    copied = match.end;
  }
  out.append(text.substr(copied));
  origin = new_origin;
  return out;
}

std::string strip(std::string_view text, bool left, bool right, size_t& origin) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!is_white_space(next_codepoint(text, next))) break;
      begin = next;
    }
    if (begin > 0) origin = 0;  // the first character is gone
  }
  if (right) {
    // Walk back over whole characters: find the start of the last character each time.
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t probe = start;
      if (!is_white_space(next_codepoint(text, probe))) break;
      end = start;
    }
  }
  origin = std::min(origin, end - begin);
  return std::string(text.substr(begin, end - begin));
}

// Unicode normalization of `s`, and where the origin stretch ends in the result: the normalized
// form of the stretch if the result starts with it, else (the stretch composed with what follows)
// the result's first character.
std::string normalize_form(const std::string& s, NormalForm form, size_t& origin) {
  std::string out = normalize_unicode(s, form);
  if (origin > 0 && !out.empty()) {
    const std::string head = normalize_unicode(std::string_view(s).substr(0, origin), form);
    if (out.compare(0, head.size(), head) == 0) {
      origin = head.size();
    } else {
      size_t first = 0;
      next_codepoint(out, first);
      origin = first;
    }
  }
  return out;
}

}  // namespace

NormalizedText normalize(const std::vector<NormalizerStep>& steps, std::string_view text, size_t origin_bytes) {
  NormalizedText result{std::string(text), std::min(origin_bytes, text.size())};
  std::string& s = result.text;
  size_t& origin = result.origin_bytes;
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc: s = normalize_form(s, NormalForm::kNfc, origin); break;
      case NormalizerStep::Kind::kNfd: s = normalize_form(s, NormalForm::kNfd, origin); break;
      case NormalizerStep::Kind::kNfkc: s = normalize_form(s, NormalForm::kNfkc, origin); break;
      case NormalizerStep::Kind::kNfkd: s = normalize_form(s, NormalForm::kNfkd, origin); break;
      case NormalizerStep::Kind::kLowercase:
        origin = to_lowercase(std::string_view(s).substr(0, origin)).size();  // a per-character mapping
        s = to_lowercase(s);
        break;
      case NormalizerStep::Kind::kReplace: s = replace_all(*step.pattern, s, step.content, origin); break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) {  // an empty stretch stays empty
          s = step.content + s;
          if (origin > 0) origin += step.content.size();  // the prefix aligns with the first character
        }
        break;
      case NormalizerStep::Kind::kStrip: s = strip(s, step.strip_left, step.strip_right, origin); break;
    }
  }
  return result;
}

}  // namespace moert::text
