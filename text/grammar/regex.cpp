#include "text/grammar/regex.h"

#include <tuple>

#include "text/grammar/char_class.h"
#include "text/grammar/text_cursor.h"

namespace moert::grammar {
namespace {

constexpr int kMaxDepth = 200;

// JavaScript's \s: WhiteSpace and LineTerminator code points.
const CodepointRanges& space_ranges() {
  static const CodepointRanges r = normalize({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                              {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                              {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
  return r;
}
const CodepointRanges& word_ranges() {
  static const CodepointRanges r = normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return r;
}
const CodepointRanges& digit_ranges() {
  static const CodepointRanges r = {{'0', '9'}};
  return r;
}
// `.` without the s flag: anything but a line terminator.
const CodepointRanges& dot_ranges() {
  static const CodepointRanges r = complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
  return r;
}

std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: {
      static const char* hex = "0123456789abcdef";
      return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
    }
  }
}

class RegexParser : private TextCursor {
 public:
  RegexParser(std::string_view text, RegexTarget target) : TextCursor(text, "regex"), target_(target) {}

  Result<Expr> parse() {
    MOERT_ASSIGN_OR_RETURN(Expr e, parse_alternatives(0));
    if (pos_ < text_.size()) return error("unbalanced ')'");
    return e;
  }

 private:

  Result<Expr> parse_alternatives(int depth) {
    if (depth > kMaxDepth) return error("groups nested deeper than " + std::to_string(kMaxDepth));
    std::vector<Expr> alts;
    while (true) {
      MOERT_ASSIGN_OR_RETURN(Expr s, parse_sequence(depth));
      alts.push_back(std::move(s));
      if (peek() != '|' || at_end()) break;
      ++pos_;
    }
    return alt(std::move(alts));
  }

  Result<Expr> parse_sequence(int depth) {
    std::vector<Expr> items;
    const size_t start = pos_;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (depth != 0 || pos_ != start) return error("'^' is supported only at the start of the pattern or of a top-level alternative");
        ++pos_;
        continue;
      }
      if (peek() == '$') {
        ++pos_;
        if (depth != 0 || !(at_end() || peek() == '|')) return error("'$' is supported only at the end of the pattern or of a top-level alternative");
        continue;
      }
      MOERT_ASSIGN_OR_RETURN(Expr atom, parse_atom(depth));
      MOERT_ASSIGN_OR_RETURN(atom, parse_quantifier(std::move(atom)));
      items.push_back(std::move(atom));
    }
    return seq(std::move(items));
  }

  Result<Expr> parse_quantifier(Expr atom) {
    while (!at_end()) {
      int min = 0, max = -1;
      const char c = peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{' && peek(1) >= '0' && peek(1) <= '9') {
        ++pos_;
        MOERT_ASSIGN_OR_RETURN(std::tie(min, max), parse_repeat_bounds("quantifier"));
      } else {
        break;
      }
      if (peek() == '?') ++pos_;  // lazy: same language
      atom = repeat(std::move(atom), min, max);
      if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        return error("nothing to repeat");
      }
    }
    return atom;
  }

  Result<Expr> parse_atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        if (peek(1) == ':') {
          pos_ += 2;
        } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
          pos_ += 2;
          while (!at_end() && peek() != '>') ++pos_;
          if (at_end()) return error("unterminated group name");
          ++pos_;
        } else {
          return error("lookaround assertions are not supported");
        }
      }
      MOERT_ASSIGN_OR_RETURN(Expr inner, parse_alternatives(depth + 1));
      if (peek() != ')' || at_end()) return error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return codepoints_expr(dot_ranges(), target_);
    }
    if (c == '*' || c == '+' || c == '?') return error("nothing to repeat");
    if (c == '{' && peek(1) >= '0' && peek(1) <= '9') return error("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      CodepointRanges set;
      MOERT_RETURN_IF_ERROR(parse_escape(/*in_class=*/false, &set));
      return codepoints_expr(set, target_);
    }
    if (c == ']' || c == '}') return error(std::string("lone '") + c + "' (escape it)");
    size_t p = pos_;
    Result<uint32_t> cp = decode_utf8(text_, &p);
    if (!cp.is_ok()) return error(cp.status().message());
    pos_ = p;
    return codepoints_expr({{*cp, *cp}}, target_);
  }

  Result<Expr> parse_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodepointRanges set;
    while (true) {
      if (at_end()) return error("unterminated character class");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      CodepointRanges first;
      MOERT_RETURN_IF_ERROR(parse_class_atom(&first));
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        CodepointRanges last;
        MOERT_RETURN_IF_ERROR(parse_class_atom(&last));
        if (first.size() != 1 || last.size() != 1 || first[0].first != first[0].second || last[0].first != last[0].second) {
          return error("a class escape cannot bound a range");
        }
        if (last[0].first < first[0].first) return error("range out of order in character class");
        set.push_back({first[0].first, last[0].first});
      } else {
        set.insert(set.end(), first.begin(), first.end());
      }
    }
    set = normalize(std::move(set));
    return codepoints_expr(negated ? complement(set) : set, target_);
  }

  Status parse_class_atom(CodepointRanges* out) {
    if (peek() == '\\') {
      ++pos_;
      return parse_escape(/*in_class=*/true, out);
    }
    size_t p = pos_;
    Result<uint32_t> cp = decode_utf8(text_, &p);
    if (!cp.is_ok()) return error(cp.status().message());
    pos_ = p;
    out->push_back({*cp, *cp});
    return Status::ok();
  }

  // After a backslash: one code point or a class escape, appended to *out.
  Status parse_escape(bool in_class, CodepointRanges* out) {
    if (at_end()) return error("pattern ends with '\\'");
    const char e = peek();
    ++pos_;
    const auto one = [&](uint32_t cp) {
      out->push_back({cp, cp});
      return Status::ok();
    };
    const auto add = [&](const CodepointRanges& r) {
      out->insert(out->end(), r.begin(), r.end());
      return Status::ok();
    };
    switch (e) {
      case 'd': return add(digit_ranges());
      case 'D': return add(complement(digit_ranges()));
      case 'w': return add(word_ranges());
      case 'W': return add(complement(word_ranges()));
      case 's': return add(space_ranges());
      case 'S': return add(complement(space_ranges()));
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0':
        if (peek() >= '0' && peek() <= '9') return error("octal escapes are not supported");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return error("word boundaries (\\b) are not supported");
      case 'B': return error("word boundaries (\\B) are not supported");
      case 'x': {
        MOERT_ASSIGN_OR_RETURN(const uint32_t v, parse_hex(2));
        return one(v);
      }
      case 'u': {
        if (peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!at_end() && peek() != '}') {
            MOERT_ASSIGN_OR_RETURN(const uint32_t d, parse_hex(1));
            v = v * 16 + d;
            if (++n > 6 || v > kMaxCodepoint) return error("code point past U+10FFFF");
          }
          if (at_end() || n == 0) return error("bad \\u{...} escape");
          ++pos_;
          return one(v);
        }
        MOERT_ASSIGN_OR_RETURN(uint32_t v, parse_hex(4));
        // A surrogate pair written as two escapes is one code point.
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          const size_t save = pos_;
          pos_ += 2;
          Result<uint32_t> low = parse_hex(4);
          if (low.is_ok() && *low >= 0xDC00 && *low <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (*low - 0xDC00));
          pos_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return error("lone surrogate escapes are not supported");
        return one(v);
      }
      case 'c': case 'p': case 'P': case 'k':
        return error(std::string("the escape '\\") + e + "' is not supported");
      default:
        if (e >= '1' && e <= '9') return error("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          return error(std::string("unknown escape '\\") + e + "'");
        }
        if (static_cast<unsigned char>(e) >= 0x80) return error("escaped non-ASCII character");
        return one(static_cast<uint32_t>(static_cast<unsigned char>(e)));
    }
  }

  RegexTarget target_;
};

}  // namespace

Expr codepoints_expr(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, RegexTarget target) {
  if (target == RegexTarget::kRaw) return codepoint_ranges(ranges);
  // Inside a JSON string: control characters, '"' and '\\' only as escapes.
  static const CodepointRanges specials = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  CodepointRanges plain;
  std::vector<Expr> alts;
  for (const auto& [first, last] : ranges) {
    uint32_t next = first;
    for (const auto& [s_first, s_last] : specials) {
      if (s_last < next || s_first > last) continue;
      if (s_first > next) plain.push_back({next, s_first - 1});
      for (uint32_t cp = std::max(next, s_first); cp <= std::min(last, s_last); ++cp) alts.push_back(literal(json_escape(cp)));
      next = s_last + 1;
      if (next > last) break;
    }
    if (next <= last) plain.push_back({next, last});
  }
  if (!plain.empty()) alts.insert(alts.begin(), codepoint_ranges(plain));
  return alt(std::move(alts));
}

Result<Expr> compile_regex(std::string_view pattern, RegexTarget target) { return RegexParser(pattern, target).parse(); }

Result<Grammar> compile_regex_grammar(std::string_view pattern) {
  MOERT_ASSIGN_OR_RETURN(Expr e, compile_regex(pattern, RegexTarget::kRaw));
  GrammarBuilder builder;
  const int root = builder.rule("root");
  MOERT_RETURN_IF_ERROR(builder.define(root, e));
  return builder.build(root);
}

}  // namespace moert::grammar
