// Filters, tests, methods and globals (docs/chat_template.md, "Filters, tests, methods,
// globals"). Every string, list or dict made here goes through the RenderHeap, so the limits of
// the render hold; case changes touch ASCII letters only.
#include "text/chat_template/jinja_builtins.h"

#include "text/chat_template/jinja_builtin_helpers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

#include "text/chat_template/jinja_operators.h"
#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja {

Value Arguments::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [key, value] : keywords) {
    if (*key == name) return value;
  }
  return Value();
}

namespace {

using namespace builtins;  // the shared helpers (jinja_builtin_helpers.h)

// ---- Filters ------------------------------------------------------------------------------------
using FilterFunction = Value (*)(RenderHeap&, const Value&, const Arguments&);

Value filter_tojson(RenderHeap& heap, const Value& input, const Arguments& args) {
  JsonStyle style;  // keyword arguments only, as json.dumps
  const Value indent = args.keyword("indent");
  if (!indent.is_undefined() && !indent.is_none()) {
    style.indent = static_cast<int>(std::clamp<int64_t>(int_argument(indent, 0, "indent"), 0, INT32_MAX));
    style.item_separator = ",";
  }
  const Value separators = args.keyword("separators");
  if (separators.is_list() && separators.list->items.size() == 2) {
    for (const Value& v : separators.list->items) string_argument(v, "separators");
    style.item_separator = separators.list->items[0].str();  // points into the heap: lives as long as the render
    style.key_separator = separators.list->items[1].str();
  }
  style.sort_keys = truthy(args.keyword("sort_keys"));
  style.ensure_ascii = truthy(args.keyword("ensure_ascii"));
  TextSink sink(heap);
  write_json(sink, input, style);
  return make_string(heap, std::move(sink.text()));
}

Value filter_length(RenderHeap& heap, const Value& input, const Arguments&) {
  switch (input.type) {
    case Type::kUndefined: return Value::of_int(0);
    case Type::kString: return Value::of_int(length_of(heap, input.str()));
    case Type::kList: return Value::of_int(static_cast<int64_t>(input.list->items.size()));
    case Type::kDict:
    case Type::kNamespace: return Value::of_int(static_cast<int64_t>(input.dict->entries.size()));
    default: wrong_filter_input("length", input);
  }
}

Value first_or_last(RenderHeap& heap, const Value& input, bool first, const char* name) {
  if (input.is_undefined()) return input;
  if (input.is_list()) {
    const auto& items = input.list->items;
    if (items.empty()) return Value();
    return first ? items.front() : items.back();
  }
  if (input.is_string()) {
    const std::vector<size_t> offsets = offsets_of(heap, input.str());
    if (offsets.size() < 2) return Value();
    const size_t i = first ? 0 : offsets.size() - 2;
    return make_string(heap, input.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  if (input.is_mapping()) {  // a dict's first or last key
    const auto& entries = input.dict->entries;
    if (entries.empty()) return Value();
    return Value::of_string(first ? entries.front().first : entries.back().first);
  }
  wrong_filter_input(name, input);
}

Value filter_list(RenderHeap& heap, const Value& input, const Arguments&) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input("list", input);
  return make_list(heap, std::move(items));
}

Value filter_reverse(RenderHeap& heap, const Value& input, const Arguments&) {
  if (input.is_string()) {
    std::vector<Value> chars = characters(heap, input.str());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->str();
    return make_string(heap, std::move(out));
  }
  if (!input.is_list()) wrong_filter_input("reverse", input);
  std::vector<Value> items(input.list->items.rbegin(), input.list->items.rend());
  return make_list(heap, std::move(items));
}

Value filter_sort(RenderHeap& heap, const Value& input, const Arguments& args) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input("sort", input);
  return sorted(heap, std::move(items), truthy(args.get(0, "reverse")), truthy(args.get(1, "case_sensitive")),
                args.get(2, "attribute"));
}

Value filter_unique(RenderHeap& heap, const Value& input, const Arguments& args) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input("unique", input);
  const bool case_sensitive = truthy(args.get(0, "case_sensitive"));
  const Value attribute = args.get(1, "attribute");
  std::vector<Value> kept;
  std::vector<Value> seen;
  for (const Value& item : items) {
    Value key = attribute.is_undefined() || attribute.is_none() ? item : attribute_path(heap, item, attribute);
    if (!case_sensitive && key.is_string()) key = make_string(heap, change_case(key.str(), false));
    bool duplicate = false;
    for (const Value& s : seen) {
      if (equal(heap, s, key)) {
        duplicate = true;
        break;
      }
    }
    if (duplicate) continue;
    seen.push_back(key);
    kept.push_back(item);
  }
  return make_list(heap, std::move(kept));
}

Value filter_join(RenderHeap& heap, const Value& input, const Arguments& args) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input("join", input);
  const Value separator = args.get(0, "d");
  const std::string sep = separator.is_undefined() ? std::string() : printed(heap, separator);
  const Value attribute = args.get(1, "attribute");
  TextSink sink(heap);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) sink.append(sep);
    write_printed(sink, attribute.is_undefined() ? items[i] : attribute_path(heap, items[i], attribute));
  }
  return make_string(heap, std::move(sink.text()));
}

Value filter_map(RenderHeap& heap, const Value& input, const Arguments& args) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input("map", input);
  const Value attribute = args.keyword("attribute");
  if (!attribute.is_undefined()) {
    const Value fallback = args.keyword("default");
    for (Value& item : items) {
      item = attribute_path(heap, item, attribute);
      if (item.is_undefined() && !fallback.is_undefined()) item = fallback;
    }
    return make_list(heap, std::move(items));
  }
  const Value filter = args.get(0, "");
  if (!filter.is_string()) fail("map() needs attribute= or the name of a filter");
  const Arguments rest = rest_of(args, 1);
  for (Value& item : items) item = apply_filter(heap, filter.str(), item, rest);
  return make_list(heap, std::move(items));
}

// select / reject / selectattr / rejectattr.
Value select_items(RenderHeap& heap, const Value& input, const Arguments& args, bool by_attribute, bool keep,
                   const char* name) {
  std::vector<Value> items;
  if (!iterate(heap, input, items)) wrong_filter_input(name, input);
  const size_t test_index = by_attribute ? 1 : 0;
  const Value attribute = by_attribute ? args.get(0, "") : Value();
  const Value test = args.get(test_index, "");
  if (!test.is_undefined() && !test.is_string()) fail(std::string(name) + "() test name must be a string");
  const Arguments rest = rest_of(args, test_index + 1);
  std::vector<Value> kept;
  for (const Value& item : items) {
    const Value subject = by_attribute ? attribute_path(heap, item, attribute) : item;
    const bool passes = test.is_undefined() ? truthy(subject) : apply_test(heap, test.str(), subject, rest);
    if (passes == keep) kept.push_back(item);
  }
  return make_list(heap, std::move(kept));
}

Value filter_select(RenderHeap& heap, const Value& input, const Arguments& args) {
  return select_items(heap, input, args, false, true, "select");
}
Value filter_reject(RenderHeap& heap, const Value& input, const Arguments& args) {
  return select_items(heap, input, args, false, false, "reject");
}
Value filter_selectattr(RenderHeap& heap, const Value& input, const Arguments& args) {
  return select_items(heap, input, args, true, true, "selectattr");
}
Value filter_rejectattr(RenderHeap& heap, const Value& input, const Arguments& args) {
  return select_items(heap, input, args, true, false, "rejectattr");
}

Value filter_items(RenderHeap& heap, const Value& input, const Arguments&) {
  if (input.is_undefined()) return make_list(heap, {});
  if (!input.is_mapping()) wrong_filter_input("items", input);
  return dict_items(heap, *input.dict);
}

Value filter_dictsort(RenderHeap& heap, const Value& input, const Arguments& args) { return dictsort(heap, input, args); }

Value filter_default(RenderHeap& heap, const Value& input, const Arguments& args) {
  const bool replace_falsy = truthy(args.get(1, "boolean"));
  if (input.is_undefined() || (replace_falsy && !truthy(input))) {
    const Value fallback = args.get(0, "default_value");
    return fallback.is_undefined() ? Value::of_string(heap.empty_string()) : fallback;
  }
  return input;
}

Value filter_string(RenderHeap& heap, const Value& input, const Arguments&) {
  return input.is_string() ? input : make_string(heap, printed(heap, input));
}

Value filter_safe(RenderHeap&, const Value& input, const Arguments&) { return input; }

Value filter_trim(RenderHeap& heap, const Value& input, const Arguments& args) {
  return make_string(heap, std::string(strip(heap, string_input("trim", input), args.get(0, "chars"), true, true)));
}
Value filter_upper(RenderHeap& heap, const Value& input, const Arguments&) {
  return make_string(heap, change_case(string_input("upper", input), true));
}
Value filter_lower(RenderHeap& heap, const Value& input, const Arguments&) {
  return make_string(heap, change_case(string_input("lower", input), false));
}
Value filter_title(RenderHeap& heap, const Value& input, const Arguments&) {
  return make_string(heap, title_case(string_input("title", input)));
}
Value filter_capitalize(RenderHeap& heap, const Value& input, const Arguments&) {
  return make_string(heap, capitalize(string_input("capitalize", input)));
}
Value filter_replace(RenderHeap& heap, const Value& input, const Arguments& args) {
  return replace(heap, string_input("replace", input), args.get(0, "old"), args.get(1, "new"), args.get(2, "count"));
}

Value filter_indent(RenderHeap& heap, const Value& input, const Arguments& args) {
  const std::string_view text = string_input("indent", input);
  const Value width_value = args.get(0, "width");
  std::string pad;
  if (width_value.is_string()) {
    pad = width_value.str();
  } else {
    const int64_t width = int_argument(width_value, 4, "indent width");
    if (width > heap.max_string_bytes()) heap.check_string_size(static_cast<uint64_t>(width));  // throws
    pad.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  const bool indent_first = truthy(args.get(1, "first"));
  const bool indent_blank = truthy(args.get(2, "blank"));
  TextSink out(heap);
  size_t start = 0;
  for (bool first_line = true;; first_line = false) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    if ((!first_line || indent_first) && (!line.empty() || indent_blank)) out.append(pad);
    out.append(line);
    if (end >= text.size()) break;
    out.append('\n');
    start = end + 1;
  }
  return make_string(heap, std::move(out.text()));
}

Value filter_int(RenderHeap&, const Value& input, const Arguments& args) {
  const int64_t fallback = int_argument(args.get(0, "default"), 0, "int() default");
  switch (input.type) {
    case Type::kInt: return input;
    case Type::kBool: return Value::of_int(input.boolean ? 1 : 0);
    case Type::kFloat: return Value::of_int(double_to_int(input.number, fallback));
    case Type::kString: {
      int64_t value = 0;
      return Value::of_int(parse_leading_int(input.str(), value) ? value : fallback);
    }
    default: return Value::of_int(fallback);
  }
}

Value filter_float(RenderHeap&, const Value& input, const Arguments& args) {
  const Value fallback_value = args.get(0, "default");
  const double fallback = fallback_value.is_number() ? fallback_value.as_double() : 0.0;
  switch (input.type) {
    case Type::kInt:
    case Type::kFloat: return Value::of_float(input.as_double());
    case Type::kBool: return Value::of_float(input.boolean ? 1.0 : 0.0);
    case Type::kString: {
      double value = 0;
      return Value::of_float(parse_leading_float(input.str(), value) ? value : fallback);
    }
    default: return Value::of_float(fallback);
  }
}

Value filter_abs(RenderHeap&, const Value& input, const Arguments&) {
  if (input.type == Type::kInt) return input.integer < 0 ? negate(input) : input;
  if (input.type == Type::kFloat) return Value::of_float(std::fabs(input.number));
  wrong_filter_input("abs", input);
}

Value filter_bool(RenderHeap&, const Value& input, const Arguments&) { return Value::of_bool(truthy(input)); }

Value filter_first(RenderHeap& heap, const Value& input, const Arguments&) {
  return first_or_last(heap, input, true, "first");
}
Value filter_last(RenderHeap& heap, const Value& input, const Arguments&) {
  return first_or_last(heap, input, false, "last");
}

struct NamedFilter {
  std::string_view name;
  FilterFunction function;
};

constexpr NamedFilter kFilters[] = {
    {"tojson", filter_tojson},       {"safe", filter_safe},           {"string", filter_string},
    {"length", filter_length},       {"count", filter_length},        {"first", filter_first},
    {"last", filter_last},           {"list", filter_list},           {"reverse", filter_reverse},
    {"sort", filter_sort},           {"unique", filter_unique},       {"join", filter_join},
    {"map", filter_map},             {"select", filter_select},       {"reject", filter_reject},
    {"selectattr", filter_selectattr}, {"rejectattr", filter_rejectattr}, {"items", filter_items},
    {"dictsort", filter_dictsort},   {"default", filter_default},     {"d", filter_default},
    {"trim", filter_trim},           {"upper", filter_upper},         {"lower", filter_lower},
    {"title", filter_title},         {"capitalize", filter_capitalize}, {"replace", filter_replace},
    {"indent", filter_indent},       {"int", filter_int},             {"float", filter_float},
    {"abs", filter_abs},             {"bool", filter_bool},
};

// ---- Methods ----------------------------------------------------------------------------------
struct NamedMethod {
  std::string_view name;
  Builtin builtin;
};
constexpr NamedMethod kStringMethods[] = {
    {"strip", Builtin::kStrip},   {"lstrip", Builtin::kLstrip},         {"rstrip", Builtin::kRstrip},
    {"split", Builtin::kSplit},   {"startswith", Builtin::kStartswith}, {"endswith", Builtin::kEndswith},
    {"replace", Builtin::kReplace}, {"upper", Builtin::kUpper},         {"lower", Builtin::kLower},
    {"title", Builtin::kTitle},   {"capitalize", Builtin::kCapitalize},
};
constexpr NamedMethod kDictMethods[] = {
    {"get", Builtin::kGet},       {"items", Builtin::kItems},       {"keys", Builtin::kKeys},
    {"values", Builtin::kValues}, {"dictsort", Builtin::kDictsort},
};

template <size_t N>
bool find_method(const NamedMethod (&table)[N], std::string_view name, Builtin& out) {
  for (const NamedMethod& m : table) {
    if (m.name == name) {
      out = m.builtin;
      return true;
    }
  }
  return false;
}

Value bind_method(RenderHeap& heap, Builtin builtin, const Value& self) {
  Function f;
  f.builtin = builtin;
  f.self = self;
  return Value::of_function(heap.new_function(f));
}

}  // namespace

// ---- Member access ------------------------------------------------------------------------------
Value get_attribute(RenderHeap& heap, const Value& object, const std::string* name) {
  Builtin method;
  switch (object.type) {
    case Type::kUndefined: fail_undefined(object);
    case Type::kDict:
      // `d.items` is the method even when d has a key "items" (Python's getattr comes first).
      if (find_method(kDictMethods, *name, method)) return bind_method(heap, method, object);
      [[fallthrough]];
    case Type::kNamespace: {
      const Value* found = object.dict->find(*name);
      return found != nullptr ? *found : Value::missing_attribute(object.type, name);
    }
    case Type::kString:
      if (find_method(kStringMethods, *name, method)) return bind_method(heap, method, object);
      if (*name == "length") return Value::of_int(length_of(heap, object.str()));
      break;
    case Type::kList: {
      if (*name == "length") return Value::of_int(static_cast<int64_t>(object.list->items.size()));
      int64_t index = 0;
      const auto parsed = std::from_chars(name->data(), name->data() + name->size(), index);
      if (!name->empty() && parsed.ec == std::errc() && parsed.ptr == name->data() + name->size()) {
        return get_item(heap, object, Value::of_int(index));
      }
      break;
    }
    default: break;
  }
  return Value::missing_attribute(object.type, name);
}

Value get_item(RenderHeap& heap, const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (key.is_string()) {
    if (object.is_mapping()) {
      const Value* found = object.dict->find(key.str());
      return found != nullptr ? *found : Value::missing_attribute(object.type, key.string);
    }
    return get_attribute(heap, object, key.string);
  }
  if (key.type != Type::kInt) return Value();
  int64_t index = key.integer;
  if (object.is_list()) {
    const int64_t n = static_cast<int64_t>(object.list->items.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value::missing_element(Type::kList, key.integer);
    return object.list->items[static_cast<size_t>(index)];
  }
  if (object.is_string()) {
    const std::vector<size_t> offsets = offsets_of(heap, object.str());
    const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value::missing_element(Type::kString, key.integer);
    const size_t i = static_cast<size_t>(index);
    return make_string(heap, object.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  return Value::missing_element(object.type, key.integer);
}

Value get_slice(RenderHeap& heap, const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  if (object.is_undefined()) fail_undefined(object);
  const auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.type != Type::kInt) fail(std::string("slice ") + what + " must be an integer or none, got " + type_name(v));
    return v.integer;
  };
  const int64_t step = bound(step_value, "step").value_or(1);
  std::vector<size_t> offsets;
  int64_t n = 0;
  if (object.is_list()) {
    n = static_cast<int64_t>(object.list->items.size());
  } else if (object.is_string()) {
    offsets = offsets_of(heap, object.str());
    n = static_cast<int64_t>(offsets.size()) - 1;
  } else {
    fail(std::string("Cannot slice ") + type_name(object));
  }
  // Python's slice.indices(n); a zero step gives nothing (the oracle's choice).
  const auto clamp_index = [&](std::optional<int64_t> v, int64_t fallback, int64_t low, int64_t high) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? (*v < -n ? low : *v + n) : *v;
    return std::clamp(i, low, high);
  };
  // Positions first, last - step, ... strictly between `first` and `end`; counted without overflow.
  std::vector<int64_t> picked;
  int64_t first = 0;
  int64_t end = 0;
  if (step > 0) {
    first = clamp_index(bound(start, "start"), 0, 0, n);
    end = clamp_index(bound(stop, "stop"), n, 0, n);
  } else if (step < 0) {
    first = clamp_index(bound(start, "start"), n - 1, -1, n - 1);
    end = clamp_index(bound(stop, "stop"), -1, -1, n - 1);
  }
  const uint64_t span = step > 0 ? (end > first ? static_cast<uint64_t>(end - first) : 0)
                                 : (first > end ? static_cast<uint64_t>(first - end) : 0);
  if (step != 0 && span > 0) {
    const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : uint64_t{0} - static_cast<uint64_t>(step);
    const uint64_t count = (span - 1) / stride + 1;
    for (uint64_t k = 0; k < count; ++k) {
      const int64_t offset = static_cast<int64_t>(k * stride);  // at most span - 1 <= n
      picked.push_back(step > 0 ? first + offset : first - offset);
    }
  }
  heap.charge(static_cast<int64_t>(picked.size()));
  if (object.is_list()) {
    std::vector<Value> items;
    for (int64_t i : picked) items.push_back(object.list->items[static_cast<size_t>(i)]);
    return make_list(heap, std::move(items), object.tuple);
  }
  std::string out;
  for (int64_t i : picked) {
    const size_t k = static_cast<size_t>(i);
    out.append(object.str(), offsets[k], offsets[k + 1] - offsets[k]);
  }
  return make_string(heap, std::move(out));
}

// ---- Filters and tests by name ------------------------------------------------------------------
Value apply_filter(RenderHeap& heap, std::string_view name, const Value& input, const Arguments& args) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return f.function(heap, input, args);
  }
  wrong_filter_input(name, input);
}

bool apply_test(RenderHeap& heap, std::string_view name, const Value& input, const Arguments& args) {
  const Value arg = args.get(0, "");
  const auto is = [&](std::string_view n) { return name == n; };
  if (is("defined")) return !input.is_undefined();
  if (is("undefined")) return input.is_undefined();
  if (is("none")) return input.is_none();
  if (is("boolean")) return input.type == Type::kBool;
  if (is("true")) return input.type == Type::kBool && input.boolean;
  if (is("false")) return input.type == Type::kBool && !input.boolean;
  if (is("string")) return input.is_string();
  if (is("number")) return input.is_number();
  if (is("integer")) return input.type == Type::kInt;
  if (is("float")) return input.type == Type::kFloat;
  if (is("iterable")) return (input.is_list() && !input.tuple) || input.is_string();  // as the oracle
  if (is("sequence")) return input.is_list() || input.is_string() || input.is_mapping();
  if (is("mapping")) return input.is_mapping();
  if (is("callable")) return input.type == Type::kFunction;
  if (is("lower") || is("upper")) {
    if (!input.is_string()) return false;
    bool cased = false;
    for (char c : input.str()) {
      if (ascii_lower(c) != ascii_upper(c)) {
        cased = true;
        if ((is("lower") && c != ascii_lower(c)) || (is("upper") && c != ascii_upper(c))) return false;
      }
    }
    return cased;
  }
  if (is("odd") || is("even") || is("divisibleby")) {
    if (input.type != Type::kInt) fail("cannot " + std::string(name) + " on " + type_name(input));
    if (is("divisibleby")) {
      const int64_t divisor = int_argument(arg, 0, "divisibleby() argument");
      if (divisor == 0) fail("division by zero");
      return divisor == -1 || input.integer % divisor == 0;
    }
    return (input.integer % 2 != 0) == is("odd");
  }
  BinaryOp op;
  if (is("equalto") || is("eq") || is("==") || is("sameas")) op = BinaryOp::kEqual;
  else if (is("ne") || is("!=")) op = BinaryOp::kNotEqual;
  else if (is("lt") || is("lessthan")) op = BinaryOp::kLess;
  else if (is("gt") || is("greaterthan")) op = BinaryOp::kGreater;
  else if (is("le")) op = BinaryOp::kLessEqual;
  else if (is("ge")) op = BinaryOp::kGreaterEqual;
  else if (is("in")) op = BinaryOp::kIn;
  else fail("Unknown test: " + std::string(name));
  return truthy(binary_operation(heap, op, input, arg));
}

// ---- Globals and methods --------------------------------------------------------------------------
Value call_builtin(RenderHeap& heap, const Function& function, const Arguments& args, const CivilTime& now) {
  const Value& self = function.self;
  const Value a0 = args.positional.size() > 0 ? args.positional[0] : Value();
  const Value a1 = args.positional.size() > 1 ? args.positional[1] : Value();
  switch (function.builtin) {
    case Builtin::kNamespace: {
      Dict* dict = heap.new_dict();
      if (a0.is_mapping()) {
        for (const auto& entry : a0.dict->entries) dict->set(entry.first, entry.second);
      } else if (a0.is_list()) {
        for (const Value& pair : a0.list->items) {
          if (!pair.is_list() || pair.list->items.size() != 2 || !pair.list->items[0].is_string()) {
            fail("namespace() takes a dict or a list of (key, value) pairs");
          }
          dict->set(pair.list->items[0].string, pair.list->items[1]);
        }
      } else if (!a0.is_undefined()) {
        fail(std::string("namespace() takes a dict or a list of (key, value) pairs, got ") + type_name(a0));
      }
      for (const auto& [key, value] : args.keywords) dict->set(key, value);
      return Value::of_namespace(dict);
    }
    case Builtin::kRange: {
      if (args.positional.empty() || args.positional.size() > 3) fail("range() takes 1 to 3 integers");
      for (const Value& v : args.positional) {
        if (v.type != Type::kInt) fail(std::string("range() arguments must be integers, got ") + type_name(v));
      }
      const bool one = args.positional.size() == 1;
      const __int128 start = one ? 0 : a0.integer;
      const __int128 stop = one ? a0.integer : a1.integer;
      const __int128 step = args.positional.size() == 3 ? args.positional[2].integer : 1;
      if (step == 0) fail("range() step must not be zero");
      __int128 count = 0;
      if (step > 0 && stop > start) count = (stop - start - 1) / step + 1;
      if (step < 0 && start > stop) count = (start - stop - 1) / -step + 1;
      heap.charge(static_cast<int64_t>(std::min<__int128>(count, INT64_MAX)));
      List* list = heap.new_list(static_cast<size_t>(count));
      for (__int128 i = 0; i < count; ++i) list->items.push_back(Value::of_int(static_cast<int64_t>(start + i * step)));
      return Value::of_list(list);
    }
    case Builtin::kRaiseException:
      throw RenderFailure{ChatTemplateError::Kind::kRaised, printed(heap, a0)};
    case Builtin::kStrftimeNow:
      return make_string(heap, strftime(string_argument(a0, "strftime_now() format"), now));
    // String methods.
    case Builtin::kStrip:
    case Builtin::kLstrip:
    case Builtin::kRstrip: {
      const bool left = function.builtin != Builtin::kRstrip;
      const bool right = function.builtin != Builtin::kLstrip;
      return make_string(heap, std::string(strip(heap, self.str(), a0, left, right)));
    }
    case Builtin::kSplit:
      return split(heap, self.str(), args.get(0, "sep"), int_argument(args.get(1, "maxsplit"), -1, "maxsplit"));
    case Builtin::kStartswith:
    case Builtin::kEndswith: {
      const bool start = function.builtin == Builtin::kStartswith;
      return Value::of_bool(starts_or_ends_with(self.str(), a0, start, start ? "startswith" : "endswith"));
    }
    case Builtin::kReplace: return replace(heap, self.str(), a0, a1, args.get(2, "count"));
    case Builtin::kUpper: return make_string(heap, change_case(self.str(), true));
    case Builtin::kLower: return make_string(heap, change_case(self.str(), false));
    case Builtin::kTitle: return make_string(heap, title_case(self.str()));
    case Builtin::kCapitalize: return make_string(heap, capitalize(self.str()));
    // Dict methods.
    case Builtin::kGet: {
      const Value* found = a0.is_string() ? self.dict->find(a0.str()) : nullptr;
      if (found != nullptr) return *found;
      return args.positional.size() > 1 ? a1 : args.get(1, "default").is_undefined() ? Value::none() : args.get(1, "default");
    }
    case Builtin::kItems: return dict_items(heap, *self.dict);
    case Builtin::kKeys: {
      std::vector<Value> keys;
      for (const auto& entry : self.dict->entries) keys.push_back(Value::of_string(entry.first));
      return make_list(heap, std::move(keys));
    }
    case Builtin::kValues: {
      std::vector<Value> values;
      for (const auto& entry : self.dict->entries) values.push_back(entry.second);
      return make_list(heap, std::move(values));
    }
    case Builtin::kDictsort: return dictsort(heap, self, args);
  }
  fail("unknown builtin");
}

void add_globals(RenderHeap& heap, Scope& scope) {
  scope.set("true", Value::of_bool(true));
  scope.set("True", Value::of_bool(true));
  scope.set("false", Value::of_bool(false));
  scope.set("False", Value::of_bool(false));
  scope.set("none", Value::none());
  scope.set("None", Value::none());
  const std::pair<std::string_view, Builtin> functions[] = {
      {"namespace", Builtin::kNamespace},
      {"range", Builtin::kRange},
      {"raise_exception", Builtin::kRaiseException},
      {"strftime_now", Builtin::kStrftimeNow},
  };
  for (const auto& [name, builtin] : functions) {
    Function f;
    f.builtin = builtin;
    scope.set(name, Value::of_function(heap.new_function(f)));
  }
}

}  // namespace moert::text::jinja
