#include "text/chat_template/jinja_lexer.h"

#include <charconv>
#include <cmath>

#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja {

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(const SourceText& source) : source_(source), s_(source.text) {}

  std::vector<Token> run() {
    bool strip_text_start = false;  // the previous tag ended with `-`
    while (pos_ < s_.size()) {
      const size_t tag = find_tag(pos_);
      std::string_view text = s_.substr(pos_, tag - pos_);
      size_t text_start = pos_;
      if (strip_text_start) {
        const std::string_view trimmed = trim_js_space(text, true, false);
        text_start += text.size() - trimmed.size();
        text = trimmed;
      }
      if (tag + 2 < s_.size() && s_[tag + 2] == '-') text = trim_js_space(text, false, true);
      if (!text.empty()) push_text(text_start, std::string(text));
      if (tag >= s_.size()) break;
      strip_text_start = lex_tag(tag);
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.offset = source_.origin.back();
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t pos, std::string message) const {
    throw source_.error(ChatTemplateError::Kind::kSyntax, source_.origin[pos], std::move(message));
  }

  // The next `{{`, `{%` or `{#` at or after `from`; s_.size() when none.
  size_t find_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string_view::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  void push(TokenKind kind, size_t pos, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.offset = source_.origin[pos];
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }
  void push_text(size_t pos, std::string text) { push(TokenKind::kText, pos, std::move(text)); }

  // Lexes the tag starting at `tag`; returns whether it ends with `-` (strip the next text).
  bool lex_tag(size_t tag) {
    const char kind = s_[tag + 1];
    size_t p = tag + 2;
    if (p < s_.size() && s_[p] == '-') ++p;
    if (kind == '#') {
      const size_t close = s_.find("#}", p);
      if (close == std::string_view::npos) error(tag, "Missing end of comment tag");
      pos_ = close + 2;
      return close > p && s_[close - 1] == '-';
    }
    if (kind == '%') {
      size_t after_raw = 0;
      bool strip = false;
      if (match_word_tag(tag, "raw", after_raw, strip)) return lex_raw(tag, after_raw, strip);
    }
    push(kind == '{' ? TokenKind::kOutputOpen : TokenKind::kTagOpen, tag);
    pos_ = p;
    return lex_expression(kind == '{' ? '}' : '%');
  }

  // Whether a `{% word %}` tag (with optional `-` on either side) starts at `tag`; sets `end` past
  // it and `strip_after` when it ends with `-%}`.
  bool match_word_tag(size_t tag, std::string_view word, size_t& end, bool& strip_after) const {
    if (s_.compare(tag, 2, "{%") != 0) return false;
    size_t p = tag + 2;
    if (p < s_.size() && s_[p] == '-') ++p;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    if (s_.compare(p, word.size(), word) != 0) return false;
    p += word.size();
    if (p < s_.size() && is_name_char(s_[p])) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    strip_after = p < s_.size() && s_[p] == '-';
    if (strip_after) ++p;
    if (s_.compare(p, 2, "%}") != 0) return false;
    end = p + 2;
    return true;
  }

  // {% raw %}...{% endraw %}: the content is text, only trimmed by the `-` of the two tags.
  bool lex_raw(size_t tag, size_t content_start, bool strip_start) {
    for (size_t i = s_.find("{%", content_start); i != std::string_view::npos; i = s_.find("{%", i + 2)) {
      size_t end = 0;
      bool strip_after = false;
      if (!match_word_tag(i, "endraw", end, strip_after)) continue;
      std::string_view content = s_.substr(content_start, i - content_start);
      size_t start = content_start;
      if (strip_start) {
        const std::string_view trimmed = trim_js_space(content, true, false);
        start += content.size() - trimmed.size();
        content = trimmed;
      }
      if (s_[i + 2] == '-') content = trim_js_space(content, false, true);
      if (!content.empty()) push_text(start, std::string(content));
      pos_ = end;
      return strip_after;
    }
    error(tag, "missing {% endraw %}");
  }

  // The tokens inside `{{ }}` (closer '}') or `{% %}` (closer '%') up to and including the
  // closing delimiter; returns whether it was written `-}}` / `-%}`.
  bool lex_expression(char closer) {
    int open_braces = 0;  // `}}` closes a dict literal first
    while (pos_ < s_.size()) {
      const size_t space = space_length_at(s_, pos_);
      if (space > 0) {
        pos_ += space;
        continue;
      }
      const char c = s_[pos_];
      const bool dash = c == '-';
      const size_t q = pos_ + (dash ? 1 : 0);
      if (q + 1 < s_.size() && s_[q] == closer && s_[q + 1] == '}' && (closer == '%' || open_braces == 0)) {
        push(closer == '}' ? TokenKind::kOutputClose : TokenKind::kTagClose, pos_);
        pos_ = q + 2;
        return dash;
      }
      if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
        push(TokenKind::kName, start, std::string(s_.substr(start, pos_ - start)));
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string_view op;
        for (std::string_view two : kTwo) {
          if (s_.compare(pos_, 2, two) == 0) op = two;
        }
        if (op.empty() && std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) {
          op = s_.substr(pos_, 1);
        }
        if (op.empty()) {
          size_t next = pos_;
          next_code_point(s_, next);
          error(pos_, "Unexpected character: " + std::string(s_.substr(pos_, next - pos_)));
        }
        if (op == "{") ++open_braces;
        if (op == "}" && open_braces > 0) --open_braces;
        push(TokenKind::kOperator, pos_, std::string(op));
        pos_ += op.size();
      }
    }
    return false;  // the end of the source inside a tag: the parser reports it
  }

  void lex_number() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    bool decimal = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      decimal = true;
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    Token t;
    t.offset = source_.origin[start];
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (decimal) {
      t.kind = TokenKind::kFloat;
      if (std::from_chars(first, last, t.number).ec != std::errc()) t.number = HUGE_VAL;  // only overflow fails
    } else {
      t.kind = TokenKind::kInt;
      const auto result = std::from_chars(first, last, t.integer);
      if (result.ec != std::errc()) error(start, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = s_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= s_.size()) error(start, "unterminated string");
      const char c = s_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        value += c;
        ++pos_;
        continue;
      }
      const size_t escape = pos_;
      if (pos_ + 1 >= s_.size()) error(start, "unterminated string");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'': case '"': case '\\': value += e; break;
        case 'x': append_utf8(value, read_hex(escape, 2)); break;
        case 'u': {
          char32_t cp = read_hex(escape, 4);
          // A high surrogate followed by an escaped low one is one astral code point.
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(pos_, 2, "\\u") == 0) {
            const size_t saved = pos_;
            pos_ += 2;
            const char32_t low = read_hex(saved, 4);
            if (low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              pos_ = saved;
            }
          }
          append_utf8(value, cp);
          break;
        }
        default: {
          size_t next = escape + 1;
          next_code_point(s_, next);
          error(escape, "Unexpected escaped character: " + std::string(s_.substr(escape + 1, next - escape - 1)));
        }
      }
    }
    push(TokenKind::kString, start, std::move(value));
  }

  // `digits` hex digits at pos_ (advances); the escape at `escape` is the error position.
  char32_t read_hex(size_t escape, int digits) {
    char32_t cp = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = pos_ < s_.size() ? hex_value(s_[pos_]) : -1;
      if (h < 0) error(escape, "invalid escape: expected " + std::to_string(digits) + " hex digits");
      cp = cp * 16 + static_cast<char32_t>(h);
      ++pos_;
    }
    return cp;
  }

  const SourceText& source_;
  std::string_view s_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const SourceText& source) { return Lexer(source).run(); }

}  // namespace moert::text::jinja
