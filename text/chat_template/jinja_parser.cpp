#include "text/chat_template/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "text/chat_template/jinja_lexer.h"

namespace moert::text::jinja {

namespace {

bool is_reserved(std::string_view word) {
  return word == "and" || word == "or" || word == "not" || word == "in" || word == "is" || word == "if" ||
         word == "else";
}

int height_of(const ExprPtr& e) { return e ? e->height : 0; }

class Parser {
 public:
  Parser(const SourceText& source, std::vector<Token> tokens) : source_(source), tokens_(std::move(tokens)) {}

  std::vector<Stmt> parse_template() { return parse_body({}, nullptr); }

 private:
  // ---- Tokens and errors ----------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_operator(std::string_view op) const { return peek().is_operator(op); }
  bool at_name(std::string_view name) const { return peek().is_name(name); }

  [[noreturn]] void error(uint32_t offset, std::string message) const {
    throw source_.error(ChatTemplateError::Kind::kSyntax, offset, std::move(message));
  }
  // "expected X" at the token, or "Unexpected end of input" when the source ended.
  [[noreturn]] void unexpected(const Token& t, const std::string& expected) const {
    error(t.offset, t.kind == TokenKind::kEnd ? "Unexpected end of input" : "expected " + expected);
  }
  void expect_operator(std::string_view op) {
    if (!at_operator(op)) unexpected(peek(), "'" + std::string(op) + "'");
    advance();
  }
  void expect_tag_close() {
    if (peek().kind != TokenKind::kTagClose) unexpected(peek(), "'%}'");
    advance();
  }
  std::string expect_name(const std::string& what) {
    if (peek().kind != TokenKind::kName) unexpected(peek(), what);
    return advance().text;
  }

  // Guards one level of recursion (docs/chat_template.md, "Syntax": nesting limit).
  struct Nest {
    Nest(Parser& p, const Token& at) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.too_deep(at.offset);
    }
    ~Nest() { --parser.depth_; }
    Parser& parser;
  };
  [[noreturn]] void too_deep(uint32_t offset) const {
    error(offset, "the template is nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }

  // ---- Nodes ----------------------------------------------------------------------------------
  ExprPtr make(ExprKind kind, uint32_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }
  // Sets the height of a finished node and enforces the nesting limit.
  ExprPtr finish(ExprPtr e) {
    int h = std::max({height_of(e->operand), height_of(e->second), height_of(e->third)});
    for (const ExprPtr& item : e->items) h = std::max(h, height_of(item));
    for (const Argument& a : e->args) h = std::max(h, height_of(a.value));
    for (const Argument& a : e->filter.args) h = std::max(h, height_of(a.value));
    e->height = h + 1;
    if (e->height > kMaxNesting) too_deep(e->offset);
    return e;
  }
  void finish(Stmt& s) {
    int h = std::max(height_of(s.value), height_of(s.condition));
    for (const Parameter& p : s.params) h = std::max(h, height_of(p.default_value));
    for (const FilterCall& f : s.filters) {
      for (const Argument& a : f.args) h = std::max(h, height_of(a.value));
    }
    for (const Stmt& child : s.body) h = std::max(h, child.height);
    for (const Stmt& child : s.else_body) h = std::max(h, child.height);
    s.height = h + 1;
    if (s.height > kMaxNesting) too_deep(s.offset);
  }

  // ---- Statements -----------------------------------------------------------------------------
  struct Opener {
    uint32_t offset;
    std::string end_tag;
  };

  // Statements up to the end of the source (opener null) or up to a `{% word %}` with a word of
  // `stops`, which is left for the caller.
  std::vector<Stmt> parse_body(std::initializer_list<std::string_view> stops, const Opener* opener) {
    std::vector<Stmt> body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (opener != nullptr) {
          int line = 0;
          int column = 0;
          source_.locate(opener->offset, line, column);
          error(t.offset, "missing {% " + opener->end_tag + " %} for the block opened at line " + std::to_string(line) +
                              ", column " + std::to_string(column));
        }
        return body;
      }
      if (t.kind == TokenKind::kText) {
        Stmt s;
        s.kind = StmtKind::kText;
        s.offset = t.offset;
        s.text = advance().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kOutputOpen) {
        Stmt s;
        s.kind = StmtKind::kOutput;
        s.offset = advance().offset;
        s.value = parse_expression();
        if (peek().kind != TokenKind::kOutputClose) unexpected(peek(), "'}}'");
        advance();
        finish(s);
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kTagOpen) {
        const Token& word = peek(1);
        if (word.kind != TokenKind::kName) unexpected(word, "a statement name");
        if (std::find(stops.begin(), stops.end(), word.text) != stops.end()) return body;
        parse_statement(body);
      } else {
        unexpected(t, "text or a tag");
      }
    }
  }

  // Consumes `{% word %}` (the caller checked the word).
  void parse_end_tag() {
    advance();
    advance();
    expect_tag_close();
  }

  std::vector<Stmt> parse_block(uint32_t offset, const std::string& end_tag,
                                std::initializer_list<std::string_view> stops) {
    const Opener opener{offset, end_tag};
    return parse_body(stops, &opener);
  }

  void parse_statement(std::vector<Stmt>& body) {
    const Token& open = advance();
    Nest nest(*this, open);
    const std::string word = advance().text;
    Stmt s;
    s.offset = open.offset;
    if (word == "if") {
      parse_if(s);
    } else if (word == "for") {
      parse_for(s);
    } else if (word == "set") {
      parse_set(s);
    } else if (word == "macro") {
      s.kind = StmtKind::kMacro;
      s.text = expect_name("a macro name");
      parse_parameters(s.params, true);
      expect_tag_close();
      s.body = parse_block(s.offset, "endmacro", {"endmacro"});
      parse_end_tag();
    } else if (word == "call") {
      s.kind = StmtKind::kCallBlock;
      if (at_operator("(")) parse_parameters(s.params, true);
      s.value = parse_expression();
      if (s.value->kind != ExprKind::kCall) error(s.value->offset, "expected a macro call");
      expect_tag_close();
      s.body = parse_block(s.offset, "endcall", {"endcall"});
      parse_end_tag();
    } else if (word == "filter") {
      s.kind = StmtKind::kFilterBlock;
      do {
        s.filters.push_back(parse_filter_call());
      } while (at_operator("|") && (advance(), true));
      expect_tag_close();
      s.body = parse_block(s.offset, "endfilter", {"endfilter"});
      parse_end_tag();
    } else if (word == "break" || word == "continue") {
      s.kind = word == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_tag_close();
    } else if (word == "generation" || word == "endgeneration") {
      expect_tag_close();  // transformers' assistant-mask markers print nothing
      return;
    } else if (word == "elif" || word == "else" || word.rfind("end", 0) == 0) {
      error(open.offset, "unexpected {% " + word + " %}");
    } else {
      error(open.offset, "unknown statement '" + word + "'");
    }
    finish(s);
    body.push_back(std::move(s));
  }

  // After `{% if` or `{% elif`: the condition, the body, then elif / else / endif.
  void parse_if(Stmt& s) {
    s.kind = StmtKind::kIf;
    s.value = parse_expression();
    expect_tag_close();
    s.body = parse_block(s.offset, "endif", {"elif", "else", "endif"});
    const std::string& next = peek(1).text;
    if (next == "elif") {
      Stmt elif;
      elif.offset = advance().offset;
      advance();
      Nest nest(*this, peek());
      parse_if(elif);
      finish(elif);
      s.else_body.push_back(std::move(elif));
      return;  // the innermost elif consumed the endif
    }
    if (next == "else") {
      parse_end_tag();
      s.else_body = parse_block(s.offset, "endif", {"endif"});
    }
    parse_end_tag();
  }

  void parse_for(Stmt& s) {
    s.kind = StmtKind::kFor;
    s.names = parse_target_names();
    if (!at_name("in")) unexpected(peek(), "'in'");
    advance();
    s.value = parse_tuple_or(false);
    if (at_name("if")) {
      advance();
      s.condition = parse_expression();
    }
    expect_tag_close();
    s.body = parse_block(s.offset, "endfor", {"else", "endfor"});
    if (peek(1).text == "else") {
      parse_end_tag();
      s.else_body = parse_block(s.offset, "endfor", {"endfor"});
    }
    parse_end_tag();
  }

  void parse_set(Stmt& s) {
    const std::string first = expect_name("a variable name");
    s.names.push_back(first);
    if (at_operator(".")) {
      advance();
      s.attribute = expect_name("an attribute name");
    } else {
      while (at_operator(",")) {
        advance();
        s.names.push_back(expect_name("a variable name"));
      }
    }
    if (at_operator("=")) {
      advance();
      s.kind = StmtKind::kSet;
      s.value = parse_tuple_or(true);
      expect_tag_close();
      return;
    }
    s.kind = StmtKind::kSetBlock;
    expect_tag_close();
    s.body = parse_block(s.offset, "endset", {"endset"});
    parse_end_tag();
  }

  // `a`, `a, b` or `(a, b)`.
  std::vector<std::string> parse_target_names() {
    const bool parenthesized = at_operator("(");
    if (parenthesized) advance();
    std::vector<std::string> names{expect_name("a variable name")};
    while (at_operator(",")) {
      advance();
      names.push_back(expect_name("a variable name"));
    }
    if (parenthesized) expect_operator(")");
    return names;
  }

  // `(a, b=default, ...)`.
  void parse_parameters(std::vector<Parameter>& params, bool allow_defaults) {
    expect_operator("(");
    while (!at_operator(")")) {
      const Token& name = peek();
      Parameter p;
      p.name = expect_name("a parameter name");
      for (const Parameter& other : params) {
        if (other.name == p.name) error(name.offset, "duplicate parameter name: " + p.name);
      }
      if (allow_defaults && at_operator("=")) {
        advance();
        p.default_value = parse_expression();
      }
      params.push_back(std::move(p));
      if (at_operator(",")) advance();
    }
    advance();
  }

  // ---- Expressions, loosest first -------------------------------------------------------------
  ExprPtr parse_expression() {
    Nest nest(*this, peek());
    return parse_conditional();
  }

  // An expression, or a tuple written without parentheses (`a, b`) as in `set` and `for`.
  ExprPtr parse_tuple_or(bool with_conditional) {
    const uint32_t offset = peek().offset;
    ExprPtr first = with_conditional ? parse_expression() : parse_or();
    if (!at_operator(",")) return first;
    ExprPtr tuple = make(ExprKind::kTuple, offset);
    tuple->items.push_back(std::move(first));
    while (at_operator(",")) {
      advance();
      if (peek().kind == TokenKind::kTagClose) break;
      tuple->items.push_back(with_conditional ? parse_expression() : parse_or());
    }
    return finish(std::move(tuple));
  }

  ExprPtr parse_conditional() {
    ExprPtr value = parse_or();
    if (!at_name("if")) return value;
    advance();
    ExprPtr e = make(ExprKind::kConditional, value->offset);
    e->operand = std::move(value);
    e->second = parse_or();
    if (at_name("else")) {
      advance();
      Nest nest(*this, peek());
      e->third = parse_conditional();
    }
    return finish(std::move(e));
  }

  ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, BinaryOp op = BinaryOp::kAdd) {
    ExprPtr e = make(kind, left->offset);
    e->op = op;
    e->operand = std::move(left);
    e->second = std::move(right);
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      advance();
      left = binary(ExprKind::kOr, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      advance();
      left = binary(ExprKind::kAnd, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!at_name("not")) return parse_comparison();
    const Token& t = advance();
    Nest nest(*this, t);
    ExprPtr e = make(ExprKind::kNot, t.offset);
    e->operand = parse_not();
    return finish(std::move(e));
  }

  ExprPtr parse_comparison() {
    ExprPtr left = parse_additive();
    while (true) {
      BinaryOp op;
      const Token& t = peek();
      if (t.is_operator("==")) op = BinaryOp::kEqual;
      else if (t.is_operator("!=")) op = BinaryOp::kNotEqual;
      else if (t.is_operator("<")) op = BinaryOp::kLess;
      else if (t.is_operator(">")) op = BinaryOp::kGreater;
      else if (t.is_operator("<=")) op = BinaryOp::kLessEqual;
      else if (t.is_operator(">=")) op = BinaryOp::kGreaterEqual;
      else if (t.is_name("in")) op = BinaryOp::kIn;
      else if (t.is_name("not") && peek(1).is_name("in")) op = BinaryOp::kNotIn;
      else return left;
      advance();
      if (op == BinaryOp::kNotIn) advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_additive(), op);
    }
  }

  ExprPtr parse_additive() {
    ExprPtr left = parse_multiplicative();
    while (true) {
      BinaryOp op;
      if (at_operator("+")) op = BinaryOp::kAdd;
      else if (at_operator("-")) op = BinaryOp::kSubtract;
      else if (at_operator("~")) op = BinaryOp::kConcat;
      else return left;
      advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_multiplicative(), op);
    }
  }

  ExprPtr parse_multiplicative() {
    ExprPtr left = parse_power();
    while (true) {
      BinaryOp op;
      if (at_operator("*")) op = BinaryOp::kMultiply;
      else if (at_operator("/")) op = BinaryOp::kDivide;
      else if (at_operator("//")) op = BinaryOp::kFloorDivide;
      else if (at_operator("%")) op = BinaryOp::kModulo;
      else return left;
      advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_power(), op);
    }
  }

  // `**` is left-associative, as in Jinja: 2 ** 3 ** 2 == 64.
  ExprPtr parse_power() {
    ExprPtr left = parse_test();
    while (at_operator("**")) {
      advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_test(), BinaryOp::kPower);
    }
    return left;
  }

  ExprPtr parse_test() {
    ExprPtr left = parse_filter();
    while (at_name("is")) {
      advance();
      ExprPtr e = make(ExprKind::kTest, left->offset);
      if (at_name("not")) {
        advance();
        e->negated = true;
      }
      e->name = expect_name("a test name");
      if (at_operator("(")) e->args = parse_arguments();
      e->operand = std::move(left);
      left = finish(std::move(e));
    }
    return left;
  }

  ExprPtr parse_filter() {
    ExprPtr left = parse_unary();
    while (at_operator("|")) {
      advance();
      ExprPtr e = make(ExprKind::kFilter, left->offset);
      e->filter = parse_filter_call();
      e->operand = std::move(left);
      left = finish(std::move(e));
    }
    return left;
  }

  FilterCall parse_filter_call() {
    FilterCall call;
    call.name = expect_name("a filter name");
    if (at_operator("(")) call.args = parse_arguments();
    return call;
  }

  ExprPtr parse_unary() {
    if (!at_operator("-") && !at_operator("+")) return parse_postfix();
    const Token& t = advance();
    Nest nest(*this, t);
    ExprPtr e = make(t.text == "-" ? ExprKind::kNegate : ExprKind::kPlus, t.offset);
    e->operand = parse_unary();
    return finish(std::move(e));
  }

  ExprPtr parse_postfix() {
    ExprPtr e = parse_primary();
    while (true) {
      if (at_operator(".")) {
        advance();
        ExprPtr attribute = make(ExprKind::kAttribute, e->offset);
        const Token& name = peek();
        if (name.kind != TokenKind::kName && name.kind != TokenKind::kInt) unexpected(name, "an attribute name");
        attribute->name = name.kind == TokenKind::kInt ? std::to_string(name.integer) : name.text;
        advance();
        attribute->operand = std::move(e);
        e = finish(std::move(attribute));
      } else if (at_operator("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_operator("(")) {
        ExprPtr call = make(ExprKind::kCall, e->offset);
        call->args = parse_arguments();
        call->operand = std::move(e);
        e = finish(std::move(call));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    advance();  // [
    if (at_operator("]")) error(peek().offset, "expected an index or a slice");
    ExprPtr start;
    if (!at_operator(":")) start = parse_expression();
    ExprPtr e;
    if (at_operator(":")) {
      advance();
      e = make(ExprKind::kSlice, object->offset);
      e->items.resize(3);
      e->items[0] = std::move(start);
      if (!at_operator(":") && !at_operator("]")) e->items[1] = parse_expression();
      if (at_operator(":")) {
        advance();
        if (!at_operator("]")) e->items[2] = parse_expression();
      }
    } else {
      e = make(ExprKind::kItem, object->offset);
      e->second = std::move(start);
    }
    expect_operator("]");
    e->operand = std::move(object);
    return finish(std::move(e));
  }

  // `(a, b, name=c, *list, **dict)`; commas are optional, as in the oracle.
  std::vector<Argument> parse_arguments() {
    advance();  // (
    std::vector<Argument> args;
    bool seen_keyword = false;
    while (!at_operator(")")) {
      const Token& t = peek();
      Argument a;
      if (t.is_operator("*") || t.is_operator("**")) {
        a.kind = t.text == "*" ? Argument::Kind::kSpreadList : Argument::Kind::kSpreadDict;
        advance();
      } else if (t.kind == TokenKind::kName && peek(1).is_operator("=")) {
        a.kind = Argument::Kind::kKeyword;
        a.keyword = t.text;
        seen_keyword = true;
        advance();
        advance();
      } else if (seen_keyword) {
        error(t.offset, "positional arguments must come before keyword arguments");
      }
      a.value = parse_expression();
      args.push_back(std::move(a));
      if (at_operator(",")) advance();
    }
    advance();
    return args;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        ExprPtr e = make(ExprKind::kLiteral, t.offset);
        e->literal.kind = t.kind == TokenKind::kInt ? Literal::Kind::kInt : Literal::Kind::kFloat;
        e->literal.integer = t.integer;
        e->literal.number = t.number;
        advance();
        return e;
      }
      case TokenKind::kString: {
        ExprPtr e = make(ExprKind::kLiteral, t.offset);
        e->literal.kind = Literal::Kind::kString;
        while (peek().kind == TokenKind::kString) e->literal.text += advance().text;  // 'a' 'b' is 'ab'
        return e;
      }
      case TokenKind::kName: {
        if (is_reserved(t.text)) unexpected(t, "an expression");
        ExprPtr e = make(ExprKind::kVariable, t.offset);
        e->name = advance().text;
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") return parse_parenthesized();
        if (t.text == "[") return parse_sequence(ExprKind::kList, "]");
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    unexpected(t, "an expression");
  }

  // `(x)` is x; `()`, `(x,)` and `(x, y)` are tuples.
  ExprPtr parse_parenthesized() {
    const Token& open = advance();
    if (at_operator(")")) {
      advance();
      return finish(make(ExprKind::kTuple, open.offset));
    }
    ExprPtr first = parse_expression();
    if (!at_operator(",")) {
      expect_operator(")");
      return first;
    }
    ExprPtr tuple = make(ExprKind::kTuple, open.offset);
    tuple->items.push_back(std::move(first));
    while (at_operator(",")) {
      advance();
      if (at_operator(")")) break;
      tuple->items.push_back(parse_expression());
    }
    expect_operator(")");
    return finish(std::move(tuple));
  }

  ExprPtr parse_sequence(ExprKind kind, std::string_view close) {
    const Token& open = advance();
    ExprPtr e = make(kind, open.offset);
    while (!at_operator(close)) {
      e->items.push_back(parse_expression());
      if (at_operator(",")) advance();
    }
    advance();
    return finish(std::move(e));
  }

  ExprPtr parse_dict() {
    const Token& open = advance();
    ExprPtr e = make(ExprKind::kDict, open.offset);
    while (!at_operator("}")) {
      e->items.push_back(parse_expression());
      expect_operator(":");
      e->items.push_back(parse_expression());
      if (at_operator(",")) advance();
    }
    advance();
    return finish(std::move(e));
  }

  const SourceText& source_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->source = SourceText::prepare(source);
  Parser parser(program->source, tokenize(program->source));
  program->body = parser.parse_template();
  return program;
}

}  // namespace moert::text::jinja
