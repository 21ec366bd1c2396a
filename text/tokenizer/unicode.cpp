#include "text/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace moert::text {

char32_t next_codepoint(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + k]) & 0x3F); };
  char32_t c;
  if (b0 < 0xE0) {
    c = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    c = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    pos += 3;
  } else {
    c = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    pos += 4;
  }
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

Utf8Step utf8_step(std::string_view bytes) {
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  if (b0 < 0x80) return {Utf8Step::Kind::kValid, 1};
  // Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the range of the
  // second byte; every later byte is 80..BF.
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::Kind::kInvalid, 1};
  }
  for (size_t k = 1; k < length; ++k) {
    if (k >= bytes.size()) return {Utf8Step::Kind::kTruncated, bytes.size()};
    const auto b = static_cast<unsigned char>(bytes[k]);
    const unsigned char k_lo = k == 1 ? lo : 0x80, k_hi = k == 1 ? hi : 0xBF;
    if (b < k_lo || b > k_hi) return {Utf8Step::Kind::kInvalid, k};
  }
  return {Utf8Step::Kind::kValid, length};
}

bool is_valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Step step = utf8_step(s.substr(pos));
    if (step.kind != Utf8Step::Kind::kValid) return false;
    pos += step.length;
  }
  return true;
}

namespace {
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the repaired form of `bytes` and returns how many trailing bytes form a truncated
// character (left unconsumed).
size_t repair_into(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = utf8_step(bytes.substr(pos));
    if (step.kind == Utf8Step::Kind::kTruncated) return bytes.size() - pos;
    if (step.kind == Utf8Step::Kind::kValid) {
      out.append(bytes.substr(pos, step.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += step.length;
  }
  return 0;
}
}  // namespace

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  if (repair_into(bytes, out) > 0) out.append(kReplacementChar);
  return out;
}

void Utf8Repairer::append(std::string_view bytes, std::string& out) {
  pending_.append(bytes);
  const size_t truncated = repair_into(pending_, out);
  pending_.erase(0, pending_.size() - truncated);
}

void Utf8Repairer::finish(std::string& out) {
  if (!pending_.empty()) out.append(kReplacementChar);
  pending_.clear();
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool in_ranges(std::span<const CodepointRange> ranges, char32_t c) {
  // Ranges are sorted and disjoint.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](char32_t value, const CodepointRange& r) { return value < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

bool is_numeric(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return in_ranges(onig_class_extras("N"), c);
  }
}

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      // Oniguruma's extra word characters above Latin-1 are the Other_Alphabetic symbols (circled
      // letters) and letters newer than utf8proc's tables.
      return c > 0xFF && in_ranges(onig_class_extras("\\w"), c);
  }
}

namespace {

std::string utf8proc_normalize(std::string_view s, int options) {
  if (s.empty()) return {};
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (length < 0) {
    throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(length));
  }
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
}

// One stretch without inert code points. A composition can still produce one (U+11938 from
// U+11935 U+11930): Hugging Face's tables lack that pair, so it is decomposed again.
void normalize_stretch(std::string_view s, int options, std::string& out) {
  const std::string normalized = utf8proc_normalize(s, options);
  if ((options & UTF8PROC_COMPOSE) == 0) {
    out += normalized;
    return;
  }
  const int decompose = (options & ~UTF8PROC_COMPOSE) | UTF8PROC_DECOMPOSE;
  for (size_t pos = 0; pos < normalized.size();) {
    const size_t start = pos;
    const char32_t c = next_codepoint(normalized, pos);
    const std::string_view bytes = std::string_view(normalized).substr(start, pos - start);
    if (in_ranges(hf_normalization_inert(), c)) {
      out += utf8proc_normalize(bytes, decompose);
    } else {
      out += bytes;
    }
  }
}

}  // namespace

std::string normalize_unicode(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  // Inert code points split the text: each stretch between them is normalized on its own (an
  // inert starter blocks reordering and composition across it).
  std::string out;
  out.reserve(s.size());
  size_t stretch_start = 0;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    if (in_ranges(hf_normalization_inert(), next_codepoint(s, pos))) {
      normalize_stretch(s.substr(stretch_start, start - stretch_start), options, out);
      out.append(s.substr(start, pos - start));
      stretch_start = pos;
    }
  }
  normalize_stretch(s.substr(stretch_start), options, out);
  return out;
}

std::string to_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const char32_t c = next_codepoint(s, pos);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else if (c == 0x130) {
      // The one unconditional multi-character lowercase mapping (SpecialCasing.txt): İ -> i + U+0307.
      out.append("i\xCC\x87");
    } else if (const auto lower = lowercase_override(c)) {
      append_utf8(out, *lower);
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

}  // namespace moert::text
