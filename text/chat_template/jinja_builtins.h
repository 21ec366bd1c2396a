// What the template runtime provides (docs/chat_template.md, "Filters, tests, methods,
// globals"): filters, tests, the methods of strings and dicts, the global functions, and the
// member access (`.name`, `[key]`, `[a:b:c]`) that finds methods.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/chat_template/chat_template.h"
#include "text/chat_template/jinja_value.h"

namespace moert::text::jinja {

// The evaluated arguments of a call, filter or test.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<const std::string*, Value>> keywords;

  // Positional `index` or keyword `name`; undefined when neither was given.
  Value get(size_t index, std::string_view name) const;
  Value keyword(std::string_view name) const { return get(SIZE_MAX, name); }
};

Value get_attribute(RenderHeap& heap, const Value& object, const std::string* name);
Value get_item(RenderHeap& heap, const Value& object, const Value& key);
Value get_slice(RenderHeap& heap, const Value& object, const Value& start, const Value& stop, const Value& step);

Value apply_filter(RenderHeap& heap, std::string_view name, const Value& input, const Arguments& args);
bool apply_test(RenderHeap& heap, std::string_view name, const Value& input, const Arguments& args);
// Globals and bound methods (Function::Kind::kBuiltin).
Value call_builtin(RenderHeap& heap, const Function& function, const Arguments& args, const CivilTime& now);

// The names of the global scope: true/false/none (both spellings), namespace, range,
// raise_exception, strftime_now. Context variables may not replace them.
void add_globals(RenderHeap& heap, Scope& scope);

}  // namespace moert::text::jinja
