#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer/regex.h"

#include <pcre2.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

// ---- Oniguruma -> PCRE2 ----------------------------------------------------------------------------
struct GeneralCategory {
  std::string_view short_name;
  std::string_view loose_long_name;  // lowercase, no separators
};
constexpr GeneralCategory kCategories[] = {
    {"L", "letter"},          {"Lu", "uppercaseletter"},     {"Ll", "lowercaseletter"},
    {"Lt", "titlecaseletter"}, {"Lm", "modifierletter"},     {"Lo", "otherletter"},
    {"M", "mark"},            {"Mn", "nonspacingmark"},      {"Mc", "spacingmark"},
    {"Me", "enclosingmark"},  {"N", "number"},               {"Nd", "decimalnumber"},
    {"Nl", "letternumber"},   {"No", "othernumber"},         {"P", "punctuation"},
    {"Pc", "connectorpunctuation"}, {"Pd", "dashpunctuation"}, {"Ps", "openpunctuation"},
    {"Pe", "closepunctuation"}, {"Pi", "initialpunctuation"}, {"Pf", "finalpunctuation"},
    {"Po", "otherpunctuation"}, {"S", "symbol"},             {"Sm", "mathsymbol"},
    {"Sc", "currencysymbol"}, {"Sk", "modifiersymbol"},      {"So", "othersymbol"},
    {"Z", "separator"},       {"Zs", "spaceseparator"},      {"Zl", "lineseparator"},
    {"Zp", "paragraphseparator"}, {"C", "other"},            {"Cc", "control"},
    {"Cf", "format"},         {"Cs", "surrogate"},           {"Co", "privateuse"},
    {"Cn", "unassigned"},
};

// Oniguruma's \s: White_Space. Its complement, used for \S inside a class, is spelled out.
constexpr std::string_view kSpaceItems = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";
constexpr std::string_view kNotSpaceItems =
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}"
    "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}";
constexpr std::string_view kHexItems = "0-9a-fA-F";
constexpr std::string_view kNotHexItems = "\\x{0}-/:-@G-`g-\\x{10FFFF}";

std::string loose_name(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

void append_ranges(std::string& out, std::span<const CodepointRange> ranges) {
  for (const CodepointRange& r : ranges) {
    char buffer[40];
    if (r.first == r.last) {
      std::snprintf(buffer, sizeof buffer, "\\x{%X}", static_cast<unsigned>(r.first));
    } else {
      std::snprintf(buffer, sizeof buffer, "\\x{%X}-\\x{%X}", static_cast<unsigned>(r.first),
                    static_cast<unsigned>(r.last));
    }
    out.append(buffer);
  }
}

// A class written as items inside brackets: PCRE2's own items plus Oniguruma's extra code points.
struct ClassItems {
  std::string positive;   // items of the class
  std::string negative;   // items of its complement, usable inside another class ("" = not exact)
  std::string pcre_negated_escape;  // fallback for a negation inside a class (PCRE2's own tables)
};

ClassItems items_for_category(std::string_view short_name) {
  ClassItems items;
  if (short_name == "LC") {
    items.positive = "\\p{Lu}\\p{Ll}\\p{Lt}";
    append_ranges(items.positive, onig_class_extras("Lu"));
    append_ranges(items.positive, onig_class_extras("Ll"));
    items.pcre_negated_escape = "\\P{L&}";
    return items;
  }
  items.positive = "\\p{" + std::string(short_name) + "}";
  append_ranges(items.positive, onig_class_extras(short_name));
  items.pcre_negated_escape = "\\P{" + std::string(short_name) + "}";
  return items;
}

// A property name as written (without braces and without a leading ^): general categories get
// Oniguruma's code points; other properties (scripts, binary properties) are left to PCRE2.
ClassItems items_for_property(std::string_view name) {
  const std::string loose = loose_name(name);
  if (loose == "lc" || loose == "l&" || loose == "casedletter") return items_for_category("LC");
  for (const GeneralCategory& category : kCategories) {
    if (loose == loose_name(category.short_name) || loose == category.loose_long_name) {
      return items_for_category(category.short_name);
    }
  }
  ClassItems items;
  items.positive = "\\p{" + std::string(name) + "}";
  items.pcre_negated_escape = "\\P{" + std::string(name) + "}";
  return items;
}

void emit_class(std::string& out, const ClassItems& items, bool negated, bool in_class) {
  if (!in_class) {
    out += negated ? "[^" : "[";
    out += items.positive;
    out += "]";
  } else if (!negated) {
    out += items.positive;
  } else if (!items.negative.empty()) {
    out += items.negative;
  } else {
    // A negated property inside a class: PCRE2's own tables (newer characters may differ).
    out += items.pcre_negated_escape;
  }
}

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string translate_onig_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  size_t class_body_start = 0;  // index in `pattern` of the first item of the open class
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ClassItems items;
      switch (e) {
        case 's':
        case 'S':
          items.positive = std::string(kSpaceItems);
          items.negative = std::string(kNotSpaceItems);
          emit_class(out, items, e == 'S', in_class);
          ++i;
          continue;
        case 'h':
        case 'H':
          items.positive = std::string(kHexItems);
          items.negative = std::string(kNotHexItems);
          emit_class(out, items, e == 'H', in_class);
          ++i;
          continue;
        case 'w':
        case 'W':
          items.positive = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}\\p{Nl}";
          append_ranges(items.positive, onig_class_extras("\\w"));
          items.pcre_negated_escape = "\\W";
          emit_class(out, items, e == 'W', in_class);
          ++i;
          continue;
        case 'd':
        case 'D':
          items.positive = "\\p{Nd}";
          append_ranges(items.positive, onig_class_extras("\\d"));
          items.pcre_negated_escape = "\\D";
          emit_class(out, items, e == 'D', in_class);
          ++i;
          continue;
        case 'p':
        case 'P': {
          bool negated = e == 'P';
          std::string_view name;
          size_t end = i + 2;
          if (end < pattern.size() && pattern[end] == '{') {
            const size_t close = pattern.find('}', end);
            if (close == std::string_view::npos) break;  // let PCRE2 report it
            name = pattern.substr(end + 1, close - end - 1);
            end = close + 1;
          } else if (end < pattern.size()) {
            name = pattern.substr(end, 1);  // \pL
            end += 1;
          } else {
            break;
          }
          if (!name.empty() && name.front() == '^') {
            negated = !negated;
            name.remove_prefix(1);
          }
          emit_class(out, items_for_property(name), negated, in_class);
          i = end - 1;
          continue;
        }
        case 'u':
          if (i + 5 < pattern.size() && is_hex(pattern[i + 2]) && is_hex(pattern[i + 3]) &&
              is_hex(pattern[i + 4]) && is_hex(pattern[i + 5])) {
            out += "\\x{";
            out.append(pattern.substr(i + 2, 4));
            out += "}";
            i += 5;
            continue;
          }
          break;
        default:
          break;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < pattern.size() && pattern[i + 1] == ':') {
          const size_t close = pattern.find(":]", i + 2);
          if (close != std::string_view::npos) {
            out.append(pattern.substr(i, close + 2 - i));
            i = close + 1;
            continue;
          }
        }
        throw std::invalid_argument("nested character classes are not supported");
      }
      if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
        throw std::invalid_argument("character class intersection (&&) is not supported");
      }
      if (c == ']' && i != class_body_start) in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      class_body_start = i + 1;
      if (class_body_start < pattern.size() && pattern[class_body_start] == '^') {
        out += '^';
        ++class_body_start;
        ++i;
      }
      continue;
    }
    if (c == '(' && i + 2 < pattern.size() && pattern[i + 1] == '?') {
      // Inline options (?imx-imx) or (?imx-imx:...): Ruby's m is PCRE2's s.
      size_t j = i + 2;
      while (j < pattern.size() && (pattern[j] == 'i' || pattern[j] == 'm' || pattern[j] == 'x' || pattern[j] == '-')) {
        ++j;
      }
      if (j > i + 2 && j < pattern.size() && (pattern[j] == ':' || pattern[j] == ')')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) out += pattern[k] == 'm' ? 's' : pattern[k];
        i = j - 1;
        continue;
      }
    }
    if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == ',') {
      out += "{0";  // Ruby's {,n} is {0,n}
      continue;
    }
    out += c;
  }
  return out;
}

namespace {

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

std::shared_ptr<pcre2_code> compile(const std::string& pcre_pattern, uint32_t options,
                                    std::string_view original) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern.data()), pcre_pattern.size(),
                                   options | PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    throw std::invalid_argument("regex \"" + std::string(original) + "\" does not compile: " +
                                reinterpret_cast<const char*>(message.data()));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
  return std::shared_ptr<pcre2_code>(code, CodeDeleter{});
}

}  // namespace

Regex Regex::from_onig(std::string_view pattern) {
  Regex regex;
  std::string translated;
  try {
    translated = translate_onig_pattern(pattern);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("regex \"" + std::string(pattern) + "\": " + e.what());
  }
  // Ruby syntax: ^ and $ are line anchors.
  regex.code_ = compile(translated, PCRE2_MULTILINE, pattern);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Regex Regex::literal(std::string_view text) {
  std::string escaped;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) escaped += '\\';
    escaped += c;
  }
  Regex regex;
  regex.code_ = compile(escaped, 0, text);
  regex.pattern_ = std::string(text);
  return regex;
}

std::vector<ByteSpan> Regex::find_all(std::string_view subject) const {
  std::vector<ByteSpan> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
  // Created only if the JIT's default 32 KiB stack is too small for this subject.
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> jit_stack(nullptr, &pcre2_jit_stack_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(nullptr,
                                                                                    &pcre2_match_context_free);
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t search_from = 0;
  bool have_last_end = false;
  size_t last_end = 0;
  while (search_from <= subject.size()) {
    const int rc = pcre2_match(code_.get(), data, subject.size(), search_from, PCRE2_NO_UTF_CHECK,
                               match_data.get(), context.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jit_stack) {
      jit_stack.reset(pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr));
      context.reset(pcre2_match_context_create(nullptr));
      if (!jit_stack || !context) throw std::runtime_error("regex: out of memory");
      pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());
      continue;
    }
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw std::runtime_error("regex \"" + pattern_ + "\" failed: " + reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && have_last_end && last_end == end) {
      // An empty match right where the previous match ended: move on one character.
      if (search_from >= subject.size()) break;
      size_t next = search_from;
      next_codepoint(subject, next);
      search_from = next;
      continue;
    }
    matches.push_back({start, end});
    search_from = end;
    have_last_end = true;
    last_end = end;
  }
  return matches;
}

}  // namespace moert::text
