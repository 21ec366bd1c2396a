#include "text/grammar/gbnf.h"

#include "text/grammar/char_class.h"
#include "text/grammar/text_cursor.h"

namespace moert::grammar {
namespace {

// Nesting deeper than this is refused (the parser recurses per group).
constexpr int kMaxDepth = 200;

class Parser : private TextCursor {
 public:
  Parser(std::string_view text, GrammarBuilder& builder) : TextCursor(text, "grammar"), builder_(builder) {}

  Result<int> parse() {
    skip_space();
    if (at_end()) return invalid_argument("grammar is empty");
    while (!at_end()) {
      MOERT_ASSIGN_OR_RETURN(std::string name, parse_name());
      skip_space();
      if (!consume("::=")) return error("expected '::=' after rule name '" + name + "'");
      MOERT_ASSIGN_OR_RETURN(Expr body, parse_alternatives(0));
      const int rule = builder_.rule(name);
      if (builder_.is_defined(rule)) return error("rule '" + name + "' is defined twice");
      MOERT_RETURN_IF_ERROR(builder_.define(rule, body));
      skip_space();
    }
    const int root = builder_.rule("root");
    if (!builder_.is_defined(root)) return invalid_argument("grammar has no 'root' rule");
    return root;
  }

 private:
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  Result<std::string> parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) return error(std::string("expected a rule name, got '") + peek() + "'");
    return std::string(text_.substr(start, pos_ - start));
  }
  // True when a `name ::=` starts here (the end of the current rule).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  Result<Expr> parse_alternatives(int depth) {
    if (depth > kMaxDepth) return error("groups nested deeper than " + std::to_string(kMaxDepth));
    std::vector<Expr> alts;
    while (true) {
      MOERT_ASSIGN_OR_RETURN(Expr sequence, parse_sequence(depth));
      alts.push_back(std::move(sequence));
      skip_space();
      if (!consume("|")) break;
    }
    return alt(std::move(alts));
  }

  Result<Expr> parse_sequence(int depth) {
    std::vector<Expr> items;
    while (true) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')' || at_rule_start()) break;
      MOERT_ASSIGN_OR_RETURN(Expr atom, parse_atom(depth));
      MOERT_ASSIGN_OR_RETURN(atom, parse_postfix(std::move(atom)));
      items.push_back(std::move(atom));
    }
    return seq(std::move(items));
  }

  Result<Expr> parse_postfix(Expr atom) {
    while (!at_end()) {
      const char c = peek();
      if (c == '*') {
        ++pos_;
        atom = repeat(std::move(atom), 0, -1);
      } else if (c == '+') {
        ++pos_;
        atom = repeat(std::move(atom), 1, -1);
      } else if (c == '?') {
        ++pos_;
        atom = repeat(std::move(atom), 0, 1);
      } else if (c == '{') {
        ++pos_;
        MOERT_ASSIGN_OR_RETURN(const auto bounds, parse_repeat_bounds("repetition"));
        atom = repeat(std::move(atom), bounds.first, bounds.second);
      } else {
        break;
      }
    }
    return atom;
  }

  Result<Expr> parse_atom(int depth) {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (at_end()) return error("unterminated string");
        if (peek() == '"') {
          ++pos_;
          break;
        }
        MOERT_ASSIGN_OR_RETURN(const uint32_t cp, parse_char());
        bytes += utf8_encode(cp);
      }
      return literal(bytes);
    }
    if (c == '[') {
      ++pos_;
      const bool negated = consume("^");
      CodepointRanges ranges;
      while (true) {
        if (at_end()) return error("unterminated character class");
        if (peek() == ']') {
          ++pos_;
          break;
        }
        MOERT_ASSIGN_OR_RETURN(const uint32_t first, parse_char());
        uint32_t last = first;
        if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
          ++pos_;
          MOERT_ASSIGN_OR_RETURN(last, parse_char());
          if (last < first) return error("character range end below its start");
        }
        ranges.push_back({first, last});
      }
      ranges = normalize(std::move(ranges));
      return codepoint_ranges(negated ? complement(ranges) : ranges);
    }
    if (c == '.') {
      ++pos_;
      return codepoint_ranges({{0, kMaxCodepoint}});
    }
    if (c == '(') {
      ++pos_;
      MOERT_ASSIGN_OR_RETURN(Expr inner, parse_alternatives(depth + 1));
      skip_space();
      if (!consume(")")) return error("expected ')'");
      return inner;
    }
    if (is_name_char(c)) {
      MOERT_ASSIGN_OR_RETURN(std::string name, parse_name());
      return ref(builder_.rule(name));
    }
    return error(std::string("unexpected character '") + c + "'");
  }

  // One code point of a string or class, escapes resolved.
  Result<uint32_t> parse_char() {
    if (peek() != '\\') {
      size_t p = pos_;
      Result<uint32_t> cp = decode_utf8(text_, &p);
      if (!cp.is_ok()) return error(cp.status().message());
      pos_ = p;
      return *cp;
    }
    ++pos_;
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
      case 'x': return parse_codepoint(2);
      case 'u': return parse_codepoint(4);
      case 'U': return parse_codepoint(8);
      default: return error(std::string("unknown escape '\\") + e + "'");
    }
  }

  Result<uint32_t> parse_codepoint(int hex_digits) {
    MOERT_ASSIGN_OR_RETURN(const uint32_t v, parse_hex(hex_digits));
    if (v > kMaxCodepoint) return error("code point past U+10FFFF");
    return v;
  }

  GrammarBuilder& builder_;
};

}  // namespace

Result<int> parse_gbnf(std::string_view text, GrammarBuilder& builder) { return Parser(text, builder).parse(); }

Result<Grammar> compile_gbnf(std::string_view text) {
  GrammarBuilder builder;
  MOERT_ASSIGN_OR_RETURN(const int root, parse_gbnf(text, builder));
  return builder.build(root);
}

}  // namespace moert::grammar
