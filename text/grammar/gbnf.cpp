#include "text/grammar/gbnf.h"

#include "text/grammar/char_class.h"

namespace moert::grammar {
namespace {

// Nesting deeper than this is refused (the parser recurses per group).
constexpr int kMaxDepth = 200;

class Parser {
 public:
  Parser(std::string_view text, GrammarBuilder& builder) : text_(text), builder_(builder) {}

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
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  Status error(const std::string& message) const {
    return invalid_argument("grammar offset " + std::to_string(pos_) + ": " + message);
  }
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
        MOERT_ASSIGN_OR_RETURN(const int min, parse_int());
        int max = min;
        if (consume(",")) {
          max = -1;
          if (peek() != '}') {
            MOERT_ASSIGN_OR_RETURN(max, parse_int());
          }
        }
        if (!consume("}")) return error("expected '}' in a repetition");
        if (max >= 0 && max < min) return error("repetition {" + std::to_string(min) + "," + std::to_string(max) + "} has max < min");
        atom = repeat(std::move(atom), min, max);
      } else {
        break;
      }
    }
    return atom;
  }

  Result<int> parse_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 100000) return error("repetition bound over 100000");
      ++pos_;
    }
    if (pos_ == start) return error("expected a number in a repetition");
    return static_cast<int>(v);
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
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: return error(std::string("unknown escape '\\") + e + "'");
    }
  }

  Result<uint32_t> parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) return error("expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodepoint) return error("code point past U+10FFFF");
    return v;
  }

  std::string_view text_;
  size_t pos_ = 0;
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
