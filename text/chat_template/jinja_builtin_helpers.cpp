#include "text/chat_template/jinja_builtin_helpers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

#include "text/chat_template/jinja_operators.h"
#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja::builtins {

// ---- Helpers ----------------------------------------------------------------------------------
Value make_string(RenderHeap& heap, std::string s) { return heap.string_value(std::move(s)); }

Value make_list(RenderHeap& heap, std::vector<Value> items, bool tuple) {
  List* list = heap.new_list(items.size());
  list->items = std::move(items);
  return Value::of_list(list, tuple);
}

std::string printed(RenderHeap& heap, const Value& v) {
  TextSink sink(heap);
  write_printed(sink, v);
  return std::move(sink.text());
}

// The code points of s, each as a string.
std::vector<Value> characters(RenderHeap& heap, std::string_view s) {
  heap.charge_bytes(s.size());
  std::vector<Value> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    next_code_point(s, pos);
    out.push_back(make_string(heap, std::string(s.substr(start, pos - start))));
  }
  return out;
}

// The items a filter iterates: a list's items, a string's characters, a dict's keys; undefined
// is empty. False for anything else.
bool iterate(RenderHeap& heap, const Value& v, std::vector<Value>& out) {
  switch (v.type) {
    case Type::kUndefined: out.clear(); return true;
    case Type::kList: out = v.list->items; return true;
    case Type::kString: out = characters(heap, v.str()); return true;
    case Type::kDict:
    case Type::kNamespace:
      out.clear();
      for (const auto& entry : v.dict->entries) out.push_back(Value::of_string(entry.first));
      return true;
    default: return false;
  }
}

[[noreturn]] void wrong_filter_input(std::string_view filter, const Value& input) {
  const char* family = nullptr;
  switch (input.type) {
    case Type::kUndefined:
    case Type::kNone:
      fail("Cannot apply filter \"" + std::string(filter) + "\" to type: " + type_name(input));
    case Type::kInt:
    case Type::kFloat: family = "NumericValue"; break;
    case Type::kList: family = "ArrayValue"; break;
    case Type::kNamespace:
    case Type::kDict: family = "ObjectValue"; break;
    default: family = type_name(input);
  }
  fail(std::string("Unknown ") + family + " filter: " + std::string(filter));
}

// A filter's string input (undefined reads as "", like Jinja's Undefined).
std::string_view string_input(std::string_view filter, const Value& input) {
  if (input.is_string()) return input.str();
  if (input.is_undefined()) return {};
  wrong_filter_input(filter, input);
}

std::string string_argument(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + " must be a string, got " + type_name(v));
  return v.str();
}

int64_t int_argument(const Value& v, int64_t fallback, const char* what) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.type == Type::kInt) return v.integer;
  if (v.type == Type::kBool) return v.boolean ? 1 : 0;
  fail(std::string(what) + " must be an integer, got " + type_name(v));
}

// `a.b.0` of map(attribute=), sort(attribute=), selectattr(...): missing parts are undefined.
Value attribute_path(RenderHeap& heap, Value v, const Value& path) {
  if (path.type == Type::kInt) return v.is_undefined() ? v : get_item(heap, v, path);
  if (!path.is_string()) fail(std::string("attribute must be a string, got ") + type_name(path));
  const std::string& p = path.str();
  if (p.find('.') == std::string::npos) return v.is_undefined() ? v : get_attribute(heap, v, path.string);
  size_t start = 0;
  while (start <= p.size() && !v.is_undefined()) {
    const size_t dot = std::min(p.find('.', start), p.size());
    const std::string part = p.substr(start, dot - start);
    int64_t index = 0;
    const auto parsed = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && parsed.ec == std::errc() && parsed.ptr == part.data() + part.size() && v.is_list()) {
      v = get_item(heap, v, Value::of_int(index));
    } else {
      v = get_attribute(heap, v, heap.new_string(part));
    }
    start = dot + 1;
  }
  return v;
}

// Arguments from `first` on (the extra arguments of a test named inside select / map).
Arguments rest_of(const Arguments& args, size_t first) {
  Arguments rest;
  if (first < args.positional.size()) rest.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(first), args.positional.end());
  rest.keywords = args.keywords;
  return rest;
}

// ---- String operations --------------------------------------------------------------------------
std::vector<size_t> offsets_of(RenderHeap& heap, std::string_view s) {
  heap.charge_bytes(s.size());
  return code_point_offsets(s);
}

int64_t length_of(RenderHeap& heap, std::string_view s) {
  heap.charge_bytes(s.size());
  return count_code_points(s);
}

std::string change_case(std::string_view s, bool upper) {
  std::string out(s);
  for (char& c : out) c = upper ? ascii_upper(c) : ascii_lower(c);
  return out;
}

// The oracle's title: an ASCII letter after anything but [A-Za-z0-9_] is upper-cased.
std::string title_case(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool word_char_before = i > 0 && (is_ascii_alnum(out[i - 1]) || out[i - 1] == '_');
    if (!word_char_before) out[i] = ascii_upper(out[i]);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

// strip / lstrip / rstrip: JavaScript whitespace, or the code points of `chars`.
std::string_view strip(RenderHeap& heap, std::string_view s, const Value& chars, bool left, bool right) {
  if (chars.is_undefined() || chars.is_none()) return trim_js_space(s, left, right);
  const std::string set = string_argument(chars, "strip() argument");
  heap.charge_search(s.size(), set.size());
  std::vector<char32_t> strip_set;
  for (size_t pos = 0; pos < set.size();) strip_set.push_back(next_code_point(set, pos));
  const auto in_set = [&](char32_t cp) { return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end(); };
  const std::vector<size_t> offsets = offsets_of(heap, s);
  size_t first = 0;
  size_t last = offsets.size() - 1;  // code point count
  const auto cp_at = [&](size_t i) {
    size_t pos = offsets[i];
    return next_code_point(s, pos);
  };
  while (left && first < last && in_set(cp_at(first))) ++first;
  while (right && last > first && in_set(cp_at(last - 1))) --last;
  return s.substr(offsets[first], offsets[last] - offsets[first]);
}

// Python's str.split(sep, maxsplit).
Value split(RenderHeap& heap, std::string_view s, const Value& separator, int64_t max_split) {
  std::vector<Value> parts;
  heap.charge_bytes(s.size());
  if (separator.is_undefined() || separator.is_none()) {
    size_t pos = 0;
    while (true) {
      while (pos < s.size() && space_length_at(s, pos) > 0) pos += space_length_at(s, pos);
      if (pos >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        parts.push_back(make_string(heap, std::string(s.substr(pos))));
        break;
      }
      const size_t start = pos;
      while (pos < s.size() && space_length_at(s, pos) == 0) next_code_point(s, pos);
      parts.push_back(make_string(heap, std::string(s.substr(start, pos - start))));
    }
    return make_list(heap, std::move(parts));
  }
  const std::string sep = string_argument(separator, "split() separator");
  if (sep.empty()) fail("empty separator");
  heap.charge_search(s.size(), sep.size());
  size_t start = 0;
  while (true) {
    const size_t found = (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) ? std::string_view::npos
                                                                                              : s.find(sep, start);
    if (found == std::string_view::npos) {
      parts.push_back(make_string(heap, std::string(s.substr(start))));
      break;
    }
    parts.push_back(make_string(heap, std::string(s.substr(start, found - start))));
    start = found + sep.size();
  }
  return make_list(heap, std::move(parts));
}

// Python's str.replace(old, new, count); an empty `old` inserts between code points.
Value replace(RenderHeap& heap, std::string_view s, const Value& old_value, const Value& new_value, const Value& count) {
  const std::string old_text = old_value.is_string() ? old_value.str() : printed(heap, old_value);
  const std::string new_text = new_value.is_string() ? new_value.str() : printed(heap, new_value);
  int64_t remaining = int_argument(count, -1, "replace() count");
  heap.charge_search(s.size(), old_text.size());
  TextSink out(heap);
  if (old_text.empty()) {
    size_t pos = 0;
    while (true) {
      if (remaining != 0) {
        out.append(new_text);
        --remaining;
      }
      if (pos >= s.size()) break;
      const size_t start = pos;
      next_code_point(s, pos);
      out.append(s.substr(start, pos - start));
    }
    return make_string(heap, std::move(out.text()));
  }
  size_t start = 0;
  while (remaining != 0) {
    const size_t found = s.find(old_text, start);
    if (found == std::string_view::npos) break;
    out.append(s.substr(start, found - start));
    out.append(new_text);
    start = found + old_text.size();
    --remaining;
  }
  out.append(s.substr(start));
  return make_string(heap, std::move(out.text()));
}

bool starts_or_ends_with(const std::string& s, const Value& affix, bool at_start, const char* method) {
  const auto check = [&](const Value& v) {
    if (!v.is_string()) fail(std::string(method) + "() argument must be a string or tuple of strings");
    const std::string& a = v.str();
    if (a.size() > s.size()) return false;
    return at_start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& v : affix.list->items) {
      if (check(v)) return true;
    }
    return false;
  }
  return check(affix);
}

// JavaScript's parseInt (base 10) on a string: leading whitespace, a sign, digits.
bool parse_leading_int(std::string_view s, int64_t& out) {
  s = trim_js_space(s, true, false);
  size_t pos = 0;
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
  size_t end = pos;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  if (end == pos) return false;
  const bool negative = s[0] == '-';
  const auto result = std::from_chars(s.data() + pos, s.data() + end, out);
  if (result.ec != std::errc()) return false;
  if (negative) out = -out;  // from_chars read a non-negative number: no overflow
  return true;
}

// JavaScript's parseFloat: the longest decimal prefix after leading whitespace.
bool parse_leading_float(std::string_view s, double& out) {
  s = trim_js_space(s, true, false);
  size_t pos = 0;
  const bool negative = pos < s.size() && s[pos] == '-';
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
  if (s.substr(pos, 8) == "Infinity") {
    out = negative ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  const size_t digits_start = pos;
  size_t end = pos;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  size_t mantissa_digits = end - pos;
  if (end < s.size() && s[end] == '.') {
    size_t frac = end + 1;
    while (frac < s.size() && s[frac] >= '0' && s[frac] <= '9') ++frac;
    mantissa_digits += frac - end - 1;
    end = frac;
  }
  if (mantissa_digits == 0) return false;
  bool negative_exponent = false;
  if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    size_t e = end + 1;
    negative_exponent = e < s.size() && s[e] == '-';
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    size_t exp_end = e;
    while (exp_end < s.size() && s[exp_end] >= '0' && s[exp_end] <= '9') ++exp_end;
    if (exp_end > e) end = exp_end;
  }
  double value = 0;
  const auto result = std::from_chars(s.data() + digits_start, s.data() + end, value);
  if (result.ec == std::errc::result_out_of_range) value = negative_exponent ? 0.0 : HUGE_VAL;
  out = negative ? -value : value;
  return true;
}

int64_t double_to_int(double d, int64_t fallback) {
  if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) return fallback;  // NaN too
  return static_cast<int64_t>(d);
}

Value sorted(RenderHeap& heap, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  heap.charge(static_cast<int64_t>(items.size()));
  std::vector<std::pair<Value, Value>> keyed;  // (sort key, item)
  keyed.reserve(items.size());
  for (const Value& item : items) {
    keyed.emplace_back(attribute.is_undefined() || attribute.is_none() ? item : attribute_path(heap, item, attribute), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    const int c = compare(a.first, b.first, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  for (size_t i = 0; i < items.size(); ++i) items[i] = keyed[i].second;
  return make_list(heap, std::move(items));
}

Value dict_items(RenderHeap& heap, const Dict& dict) {
  std::vector<Value> pairs;
  for (const auto& [key, value] : dict.entries) pairs.push_back(make_list(heap, {Value::of_string(key), value}, true));
  return make_list(heap, std::move(pairs));
}

Value dictsort(RenderHeap& heap, const Value& input, const Arguments& args) {
  if (!input.is_mapping()) wrong_filter_input("dictsort", input);
  const bool case_sensitive = truthy(args.get(0, "case_sensitive"));
  const Value by = args.get(1, "by");
  const bool by_value = by.is_string() && by.str() == "value";
  const bool reverse = truthy(args.get(2, "reverse"));
  Value items = dict_items(heap, *input.dict);
  return sorted(heap, items.list->items, reverse, case_sensitive, Value::of_int(by_value ? 1 : 0));
}

std::string strftime(std::string_view format, const CivilTime& now) {
  static constexpr const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                            "July",    "August",   "September", "October", "November", "December"};
  const auto two = [](int n) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%02d", n);
    return std::string(buffer);
  };
  const std::string month = (now.month >= 1 && now.month <= 12) ? kMonths[now.month - 1] : "?";
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    switch (format[i + 1]) {
      case 'Y': out += std::to_string(now.year); break;
      case 'm': out += two(now.month); break;
      case 'd': out += two(now.day); break;
      case 'H': out += two(now.hour); break;
      case 'M': out += two(now.minute); break;
      case 'b': out += month.substr(0, 3); break;
      case 'B': out += month; break;
      case '%': out += '%'; break;
      default: out += format.substr(i, 2); break;  // other directives stay as written
    }
    ++i;
  }
  return out;
}

}  // namespace moert::text::jinja::builtins
