// The parsed form of a chat template (docs/chat_template.md, "Design"): a tree of statements
// holding expression trees. Built once by jinja_parser.cpp, then only read (renders share it
// across threads). Every node records the byte offset in the original source where its text
// starts; errors turn it into a line and column. No node is deeper than kMaxNesting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/chat_template/jinja_source.h"

namespace moert::text::jinja {

inline constexpr int kMaxNesting = 256;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One argument of a call, filter or test: `x`, `name=x`, `*x` or `**x`.
struct Argument {
  enum class Kind : uint8_t { kPositional, kKeyword, kSpreadList, kSpreadDict };
  Kind kind = Kind::kPositional;
  std::string keyword;
  ExprPtr value;
};

// `| name(args)`: one filter of a filter expression or of a {% filter %} block.
struct FilterCall {
  std::string name;
  std::vector<Argument> args;
};

enum class BinaryOp : uint8_t {
  kAdd, kSubtract, kMultiply, kDivide, kFloorDivide, kModulo, kPower, kConcat,
  kEqual, kNotEqual, kLess, kGreater, kLessEqual, kGreaterEqual, kIn, kNotIn,
};

enum class ExprKind : uint8_t {
  kLiteral,      // literal
  kVariable,     // name
  kList,         // items
  kTuple,        // items
  kDict,         // items: key, value, key, value...
  kAttribute,    // operand.name
  kItem,         // operand[index]  (index in `second`)
  kSlice,        // operand[items[0]:items[1]:items[2]]  (null items are omitted bounds)
  kCall,         // operand(args)
  kFilter,       // operand | filter
  kTest,         // operand is [not] name(args)
  kNegate,       // -operand
  kPlus,         // +operand
  kNot,          // not operand
  kBinary,       // operand op second
  kAnd,          // operand and second
  kOr,           // operand or second
  kConditional,  // operand if second [else third]
};

// A constant of the source: integer, decimal or string literal.
struct Literal {
  enum class Kind : uint8_t { kInt, kFloat, kString };
  Kind kind = Kind::kInt;
  int64_t integer = 0;
  double number = 0;
  std::string text;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  uint32_t offset = 0;  // where the expression's text starts in the original source
  int height = 1;       // 1 + the height of the deepest child
  BinaryOp op = BinaryOp::kAdd;
  bool negated = false;  // kTest: `is not`
  Literal literal;
  std::string name;  // kVariable, kAttribute, kTest
  ExprPtr operand, second, third;
  std::vector<ExprPtr> items;
  std::vector<Argument> args;  // kCall, kTest
  FilterCall filter;           // kFilter
};

// A macro parameter or a {% call(params) %} parameter.
struct Parameter {
  std::string name;
  ExprPtr default_value;  // null: none given
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ value }}
  kIf,           // {% if value %}body{% else %}else_body{% endif %} (elif: an If in else_body)
  kFor,          // {% for names in value if condition %}body{% else %}else_body{% endfor %}
  kSet,          // {% set names = value %} or {% set names[0].attribute = value %}
  kSetBlock,     // {% set names %}body{% endset %}
  kMacro,        // {% macro text(params) %}body{% endmacro %}
  kCallBlock,    // {% call(params) value %}body{% endcall %}
  kFilterBlock,  // {% filter filters %}body{% endfilter %}
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t offset = 0;  // the statement's `{%` (or `{{`, or the text) in the original source
  int height = 1;
  std::string text;      // kText: the text; kMacro: the macro name
  ExprPtr value;         // see StmtKind
  ExprPtr condition;     // kFor: the `if` filter
  std::vector<std::string> names;  // kFor, kSet, kSetBlock targets (more than one: unpacking)
  std::string attribute;           // kSet, kSetBlock: non-empty for `ns.attribute`
  std::vector<Parameter> params;   // kMacro, kCallBlock
  std::vector<FilterCall> filters;  // kFilterBlock
  std::vector<Stmt> body;
  std::vector<Stmt> else_body;
};

// A parsed template: what ChatTemplate holds and shares.
struct Program {
  SourceText source;
  std::vector<Stmt> body;
};

}  // namespace moert::text::jinja
