// The values a chat template computes with, and the per-render heap that owns them
// (docs/chat_template.md, "Values"). A Value is 16 trivially copyable bytes: scalars inline,
// everything else a pointer into the RenderHeap of the render, into the parsed program (string
// literals) or into the caller's context JSON (its strings and keys), all of which outlive the
// render. Lists, dicts and namespaces are shared by reference like Python objects; nothing is
// freed before the render ends, so cycles (a namespace holding itself) are harmless.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/chat_template/chat_template.h"

namespace moert::text::jinja {

struct Stmt;
struct Scope;

enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

// Why a value is undefined; it becomes Jinja's message when the value is used
// (docs/chat_template.md, "Undefined").
enum class Missing : uint8_t {
  kUnknown,    // e.g. loop.previtem on the first item, `a if false`
  kVariable,   // name: "'x' is undefined"
  kAttribute,  // owner + name: "'dict object' has no attribute 'a'"
  kElement,    // owner + index: "list object has no element 0"
};

struct List;
struct Dict;
struct Function;

struct Value {
  Type type = Type::kUndefined;
  Missing missing = Missing::kUnknown;  // kUndefined only
  Type owner = Type::kUndefined;        // kUndefined with kAttribute / kElement: the receiver's type
  bool tuple = false;                   // kList: made as a tuple (prints and unpacks like a list)
  union {
    bool boolean;
    int64_t integer;
    double number;
    const std::string* string;  // kString; kUndefined kVariable / kAttribute: the missing name
    List* list;
    Dict* dict;  // kDict and kNamespace
    Function* function;
    int64_t index;  // kUndefined kElement
  };

  Value() : integer(0) {}
  static Value none() { Value v; v.type = Type::kNone; return v; }
  static Value of_bool(bool b) { Value v; v.type = Type::kBool; v.boolean = b; return v; }
  static Value of_int(int64_t i) { Value v; v.type = Type::kInt; v.integer = i; return v; }
  static Value of_float(double d) { Value v; v.type = Type::kFloat; v.number = d; return v; }
  static Value of_string(const std::string* s) { Value v; v.type = Type::kString; v.string = s; return v; }
  static Value of_list(List* l, bool tuple = false) { Value v; v.type = Type::kList; v.list = l; v.tuple = tuple; return v; }
  static Value of_dict(Dict* d) { Value v; v.type = Type::kDict; v.dict = d; return v; }
  static Value of_namespace(Dict* d) { Value v; v.type = Type::kNamespace; v.dict = d; return v; }
  static Value of_function(Function* f) { Value v; v.type = Type::kFunction; v.function = f; return v; }
  static Value undefined_variable(const std::string* name) {
    Value v; v.missing = Missing::kVariable; v.string = name; return v;
  }
  static Value missing_attribute(Type owner, const std::string* name) {
    Value v; v.missing = Missing::kAttribute; v.owner = owner; v.string = name; return v;
  }
  static Value missing_element(Type owner, int64_t index) {
    Value v; v.missing = Missing::kElement; v.owner = owner; v.index = index; return v;
  }

  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_none() const { return type == Type::kNone; }
  bool is_string() const { return type == Type::kString; }
  bool is_list() const { return type == Type::kList; }
  bool is_number() const { return type == Type::kInt || type == Type::kFloat; }
  bool is_mapping() const { return type == Type::kDict || type == Type::kNamespace; }
  const std::string& str() const { return *string; }
  double as_double() const { return type == Type::kInt ? static_cast<double>(integer) : number; }
};

struct List {
  std::vector<Value> items;
};

// Insertion-ordered; keys are strings. Linear lookup: template dicts are small.
struct Dict {
  std::vector<std::pair<const std::string*, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(const std::string* key, Value value);  // replaces in place or appends
};

enum class Builtin : uint8_t {
  // globals
  kNamespace, kRange, kRaiseException, kStrftimeNow,
  // string methods
  kStrip, kLstrip, kRstrip, kSplit, kStartswith, kEndswith, kReplace, kUpper, kLower, kTitle, kCapitalize,
  // dict methods
  kGet, kItems, kKeys, kValues, kDictsort,
};

struct Function {
  enum class Kind : uint8_t { kBuiltin, kMacro, kCaller };
  Kind kind = Kind::kBuiltin;
  Builtin builtin = Builtin::kRange;
  Value self;                  // kBuiltin methods: the string or dict they are bound to
  const Stmt* code = nullptr;  // kMacro: the macro statement; kCaller: the call block
  Scope* closure = nullptr;    // kMacro / kCaller: the scope the body sees (live, not a copy)
};

// A variable scope: the template's globals, a loop, a macro call. Lookup walks to the parent.
struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string_view, Value>> vars;
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
};

// Internal failure of a render; the renderer adds the position of the node being evaluated and
// turns it into a ChatTemplateError.
struct RenderFailure {
  ChatTemplateError::Kind kind;
  std::string message;
};
[[noreturn]] void fail(std::string message);  // kRuntime
[[noreturn]] void fail_limit(std::string message);

// The objects of one render plus its work budget (RenderOptions limits). Every string, list
// and dict a render makes goes through here, so that the limits hold (docs/chat_template.md,
// "Errors and limits").
class RenderHeap {
 public:
  explicit RenderHeap(const RenderOptions& options) : options_(options) {}

  // One step of work (a node evaluated, an element made); kLimit past max_steps.
  void charge(int64_t steps = 1);
  // Work proportional to text: one step per 256 bytes read, and for a substring search (which
  // may cost haystack x needle) one more per 256 x 256 bytes of that product.
  void charge_bytes(uint64_t bytes) { charge(static_cast<int64_t>(bytes / 256)); }
  void charge_search(uint64_t haystack, uint64_t needle) {
    charge_bytes(haystack);
    charge(static_cast<int64_t>((haystack / 256) * (needle / 256)));
  }
  // Checks that a string of `bytes` may be made, and charges for it.
  void check_string_size(uint64_t bytes);
  int64_t max_string_bytes() const { return options_.max_output_bytes; }

  const std::string* new_string(std::string text);
  const std::string* empty_string() const { return &empty_; }
  List* new_list(size_t reserve = 0);  // charges `reserve` steps
  Dict* new_dict();
  Function* new_function(Function f);
  Scope* new_scope(Scope* parent);

  Value string_value(std::string text) { return Value::of_string(new_string(std::move(text))); }

 private:
  const RenderOptions& options_;
  int64_t steps_ = 0;
  const std::string empty_;
  std::deque<std::string> strings_;
  std::deque<List> lists_;
  std::deque<Dict> dicts_;
  std::deque<Function> functions_;
  std::deque<Scope> scopes_;
};

// Appends text up to the string size limit (for printing, tojson, join...).
class TextSink {
 public:
  explicit TextSink(RenderHeap& heap) : heap_(heap) {}
  void append(std::string_view s);
  void append(char c) { append(std::string_view(&c, 1)); }
  std::string& text() { return text_; }
  RenderHeap& heap() { return heap_; }

 private:
  RenderHeap& heap_;
  std::string text_;
};

// Values nested deeper than this cannot be printed, compared or converted (a namespace holding
// itself, a list wrapped 10000 times); context JSON deeper than this is refused.
inline constexpr int kMaxValueNesting = 256;

// The oracle's type names used in messages: "StringValue", "ArrayValue", ...
const char* type_name(const Value& v);
// Python's, for undefined messages: "dict", "list", "str", ...
const char* python_type_name(Type t);
// Jinja's message for using an undefined value.
std::string undefined_message(const Value& v);
[[noreturn]] void fail_undefined(const Value& v);

bool truthy(const Value& v);
// Equality as in docs/chat_template.md "Operators": numbers by value (true == 1), strings and
// containers by value, undefined equals only undefined.
bool equal(RenderHeap& heap, const Value& a, const Value& b, int depth = 0);
// Ordering for < > <= >= and sorting: numbers and strings; other pairs are an error.
// Total on numbers (NaN sorts last), so std::stable_sort stays well defined.
int compare(const Value& a, const Value& b, bool case_sensitive = true);

// JavaScript's Number-to-string with ".0" for integral values (docs/chat_template.md, "Printing").
std::string format_float(double d);

struct JsonStyle {
  std::string_view item_separator = ", ";
  std::string_view key_separator = ": ";
  int indent = -1;  // < 0: all on one line
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string_view undefined_text = "null";
  bool allow_functions = false;  // printing writes "<function>"; tojson fails
};
void write_json(TextSink& sink, const Value& v, const JsonStyle& style, int depth = 0);
void write_json_string(TextSink& sink, std::string_view s, bool ensure_ascii);

// What `{{ v }}` prints: nothing for none and undefined, strings as they are, the rest JSON-like.
void write_printed(TextSink& sink, const Value& v);
// What `~` (and `+` with a string) joins: like printing, but list items are joined with ","
// (none and undefined items as "undefined"), as the oracle does.
void write_concatenated(TextSink& sink, const Value& v);

}  // namespace moert::text::jinja
