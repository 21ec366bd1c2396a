// Values: the heap and budget of a render, equality and ordering, printing and JSON
// (docs/chat_template.md, "Values", "Printing", "tojson").
#include "text/chat_template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja {

// ---- Dicts and scopes -------------------------------------------------------------------------
const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (*k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string* key, Value value) {
  for (auto& [k, v] : entries) {
    if (*k == *key) {
      v = value;
      return;
    }
  }
  entries.emplace_back(key, value);
}

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = value;
      return;
    }
  }
  vars.emplace_back(name, value);
}

// ---- Failures and the heap --------------------------------------------------------------------
void fail(std::string message) { throw RenderFailure{ChatTemplateError::Kind::kRuntime, std::move(message)}; }
void fail_limit(std::string message) { throw RenderFailure{ChatTemplateError::Kind::kLimit, std::move(message)}; }

void RenderHeap::charge(int64_t steps) {
  // steps_ <= max_steps holds once a render is under way; a negative max_steps fails at once.
  if (steps_ > options_.max_steps || steps > options_.max_steps - steps_) {
    fail_limit("the render exceeded max_steps (" + std::to_string(options_.max_steps) + ")");
  }
  steps_ += steps;
}

void RenderHeap::check_string_size(uint64_t bytes) {
  if (bytes > static_cast<uint64_t>(std::max<int64_t>(options_.max_output_bytes, 0))) {
    fail_limit("a string exceeded max_output_bytes (" + std::to_string(options_.max_output_bytes) + ")");
  }
  charge(1 + static_cast<int64_t>(bytes / 256));
}

const std::string* RenderHeap::new_string(std::string text) {
  check_string_size(text.size());
  return &strings_.emplace_back(std::move(text));
}

List* RenderHeap::new_list(size_t reserve) {
  charge(1 + static_cast<int64_t>(std::min<size_t>(reserve, INT64_MAX / 2)));
  List& list = lists_.emplace_back();
  list.items.reserve(reserve);
  return &list;
}

Dict* RenderHeap::new_dict() {
  charge();
  return &dicts_.emplace_back();
}

Function* RenderHeap::new_function(Function f) {
  charge();
  return &functions_.emplace_back(f);
}

Scope* RenderHeap::new_scope(Scope* parent) {
  charge();
  Scope& scope = scopes_.emplace_back();
  scope.parent = parent;
  return &scope;
}

void TextSink::append(std::string_view s) {
  if (text_.size() + s.size() > static_cast<uint64_t>(std::max<int64_t>(heap_.max_string_bytes(), 0))) {
    heap_.check_string_size(text_.size() + s.size());  // throws
  }
  text_.append(s);
}

// ---- Names and messages -----------------------------------------------------------------------
const char* type_name(const Value& v) {
  switch (v.type) {
    case Type::kUndefined: return "UndefinedValue";
    case Type::kNone: return "NullValue";
    case Type::kBool: return "BooleanValue";
    case Type::kInt: return "IntegerValue";
    case Type::kFloat: return "FloatValue";
    case Type::kString: return "StringValue";
    case Type::kList: return v.tuple ? "TupleValue" : "ArrayValue";
    case Type::kDict: return "ObjectValue";
    case Type::kNamespace: return "NamespaceValue";
    case Type::kFunction: return "FunctionValue";
  }
  return "?";
}

const char* python_type_name(Type t) {
  switch (t) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return "list";
    case Type::kDict: return "dict";
    case Type::kNamespace: return "Namespace";
    case Type::kFunction: return "function";
  }
  return "?";
}

std::string undefined_message(const Value& v) {
  switch (v.missing) {
    case Missing::kVariable: return std::string("'").append(v.str()).append("' is undefined");
    case Missing::kAttribute:
      if (v.owner == Type::kNone) return std::string("'None' has no attribute '").append(v.str()).append("'");
      return std::string("'").append(python_type_name(v.owner)).append(" object' has no attribute '").append(v.str()).append("'");
    case Missing::kElement:
      return std::string(python_type_name(v.owner)) + " object has no element " + std::to_string(v.index);
    case Missing::kUnknown: break;
  }
  return "the value is undefined";
}

void fail_undefined(const Value& v) { fail(undefined_message(v)); }

// ---- Truth, equality, order -------------------------------------------------------------------
bool truthy(const Value& v) {
  switch (v.type) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return v.boolean;
    case Type::kInt: return v.integer != 0;
    case Type::kFloat: return v.number != 0.0;
    case Type::kString: return !v.string->empty();
    case Type::kList: return !v.list->items.empty();
    case Type::kDict: return !v.dict->entries.empty();
    case Type::kNamespace:
    case Type::kFunction: return true;
  }
  return false;
}

namespace {
bool numeric_like(const Value& v) { return v.type == Type::kInt || v.type == Type::kFloat || v.type == Type::kBool; }
double numeric_value(const Value& v) { return v.type == Type::kBool ? (v.boolean ? 1.0 : 0.0) : v.as_double(); }
}  // namespace

bool equal(RenderHeap& heap, const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueNesting) fail("cannot compare values nested deeper than 256 levels");
  heap.charge();
  if (numeric_like(a) && numeric_like(b)) {
    if (a.type == Type::kInt && b.type == Type::kInt) return a.integer == b.integer;
    if (a.type == Type::kBool && b.type == Type::kBool) return a.boolean == b.boolean;
    return numeric_value(a) == numeric_value(b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Type::kUndefined:
    case Type::kNone: return true;
    case Type::kString:
      heap.charge_bytes(std::min(a.string->size(), b.string->size()));
      return *a.string == *b.string;
    case Type::kList: {
      if (a.list == b.list) return true;
      if (a.list->items.size() != b.list->items.size()) return false;
      for (size_t i = 0; i < a.list->items.size(); ++i) {
        if (!equal(heap, a.list->items[i], b.list->items[i], depth + 1)) return false;
      }
      return true;
    }
    case Type::kDict:
    case Type::kNamespace: {
      if (a.dict == b.dict) return true;
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& [key, value] : a.dict->entries) {
        const Value* other = b.dict->find(*key);
        if (other == nullptr || !equal(heap, value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Type::kFunction: return a.function == b.function;
    default: return false;
  }
}

int compare(const Value& a, const Value& b, bool case_sensitive) {
  if (numeric_like(a) && numeric_like(b)) {
    if (a.type == Type::kInt && b.type == Type::kInt) return a.integer < b.integer ? -1 : a.integer > b.integer ? 1 : 0;
    const double x = numeric_value(a);
    const double y = numeric_value(b);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) - std::isnan(y);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) {
      const int c = a.str().compare(b.str());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    const std::string& x = a.str();
    const std::string& y = b.str();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const unsigned char p = static_cast<unsigned char>(ascii_lower(x[i]));
      const unsigned char q = static_cast<unsigned char>(ascii_lower(y[i]));
      if (p != q) return p < q ? -1 : 1;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(std::string("Cannot compare ") + type_name(a) + " with " + type_name(b));
}

// ---- Numbers ----------------------------------------------------------------------------------
std::string format_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits and the decimal exponent, then JavaScript's layout
  // (ECMAScript Number::toString): plain up to 21 integer digits, exponent form below 1e-6.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, std::fabs(d), std::chars_format::scientific);
  const std::string_view sci(buffer, static_cast<size_t>(result.ptr - buffer));
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exponent);
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // the decimal point sits after n digits
  std::string out = d < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out.append(digits).append(static_cast<size_t>(n - k), '0').append(".0");
  } else if (0 < n && n <= 21) {
    out.append(digits, 0, static_cast<size_t>(n)).append(".").append(digits, static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out.append("0.").append(static_cast<size_t>(-n), '0').append(digits);
  } else {
    out.append(digits, 0, 1);
    if (k > 1) out.append(".").append(digits, 1);
    out.append(n - 1 >= 0 ? "e+" : "e-").append(std::to_string(std::abs(n - 1)));
  }
  return out;
}

// ---- Printing and JSON ------------------------------------------------------------------------
void write_json_string(TextSink& sink, std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  size_t pos = 0;
  while (pos < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      ++pos;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\u%04x", c);
            out += hex;
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    const size_t start = pos;
    const char32_t cp = next_code_point(s, pos);
    if (!ensure_ascii) {
      out.append(s.substr(start, pos - start));
      continue;
    }
    char hex[16];
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      std::snprintf(hex, sizeof hex, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    } else {
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(cp));
    }
    out += hex;
  }
  out += '"';
  sink.append(out);
}

namespace {
void write_newline(TextSink& sink, const JsonStyle& style, int level) {
  sink.append('\n');
  const int64_t spaces = int64_t{style.indent} * level;
  if (spaces > 0) {
    if (spaces > sink.heap().max_string_bytes()) sink.heap().check_string_size(static_cast<uint64_t>(spaces));  // throws
    sink.append(std::string(static_cast<size_t>(spaces), ' '));
  }
}

void write_scalar(TextSink& sink, const Value& v) {
  switch (v.type) {
    case Type::kBool: sink.append(v.boolean ? "true" : "false"); break;
    case Type::kInt: sink.append(std::to_string(v.integer)); break;
    case Type::kFloat: sink.append(format_float(v.number)); break;
    default: break;
  }
}
}  // namespace

void write_json(TextSink& sink, const Value& v, const JsonStyle& style, int depth) {
  if (depth > kMaxValueNesting) fail("cannot print a value nested deeper than 256 levels");
  sink.heap().charge();
  switch (v.type) {
    case Type::kUndefined: sink.append(style.undefined_text); return;
    case Type::kNone: sink.append("null"); return;
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat: write_scalar(sink, v); return;
    case Type::kString: write_json_string(sink, v.str(), style.ensure_ascii); return;
    case Type::kFunction:
      if (!style.allow_functions) fail(std::string("Cannot convert to JSON: ") + type_name(v));
      sink.append("<function>");
      return;
    case Type::kList: {
      const std::vector<Value>& items = v.list->items;
      if (items.empty()) {
        sink.append("[]");
        return;
      }
      sink.append('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) sink.append(style.item_separator);
        if (style.indent >= 0) write_newline(sink, style, depth + 1);
        write_json(sink, items[i], style, depth + 1);
      }
      if (style.indent >= 0) write_newline(sink, style, depth);
      sink.append(']');
      return;
    }
    case Type::kDict:
    case Type::kNamespace: {
      std::vector<const std::pair<const std::string*, Value>*> entries;
      for (const auto& entry : v.dict->entries) entries.push_back(&entry);
      if (entries.empty()) {
        sink.append("{}");
        return;
      }
      if (style.sort_keys) {
        // Code point order is byte order in UTF-8.
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return *a->first < *b->first; });
      }
      sink.append('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) sink.append(style.item_separator);
        if (style.indent >= 0) write_newline(sink, style, depth + 1);
        write_json_string(sink, *entries[i]->first, style.ensure_ascii);
        sink.append(style.key_separator);
        write_json(sink, entries[i]->second, style, depth + 1);
      }
      if (style.indent >= 0) write_newline(sink, style, depth);
      sink.append('}');
      return;
    }
  }
}

namespace {
// Containers print JSON-like with ", " and ": ", undefined items as `undefined`.
const JsonStyle& print_style() {
  static const JsonStyle style{", ", ": ", -1, false, false, "undefined", true};
  return style;
}
}  // namespace

void write_printed(TextSink& sink, const Value& v) {
  switch (v.type) {
    case Type::kUndefined:
    case Type::kNone: return;
    case Type::kString: sink.append(v.str()); return;
    default: write_json(sink, v, print_style());
  }
}

void write_concatenated(TextSink& sink, const Value& v) {
  if (v.type != Type::kList) {
    write_printed(sink, v);
    return;
  }
  const std::vector<Value>& items = v.list->items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) sink.append(',');
    const Value& item = items[i];
    if (item.is_undefined() || item.is_none()) {
      sink.append("undefined");
    } else {
      write_printed(sink, item);
    }
  }
}

}  // namespace moert::text::jinja
