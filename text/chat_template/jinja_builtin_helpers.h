// The chat template builtins' shared helpers (jinja_builtins.cpp): values made through the
// RenderHeap, argument access, and the string and collection operations the filters and
// methods share. Internal to text/chat_template.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template/jinja_builtins.h"

namespace moert::text::jinja::builtins {

// Each is documented at its definition (jinja_builtin_helpers.cpp).
Value make_string(RenderHeap& heap, std::string s);
Value make_list(RenderHeap& heap, std::vector<Value> items, bool tuple = false);
std::string printed(RenderHeap& heap, const Value& v);
std::vector<Value> characters(RenderHeap& heap, std::string_view s);
bool iterate(RenderHeap& heap, const Value& v, std::vector<Value>& out);
[[noreturn]] void wrong_filter_input(std::string_view filter, const Value& input);
std::string_view string_input(std::string_view filter, const Value& input);
std::string string_argument(const Value& v, const char* what);
int64_t int_argument(const Value& v, int64_t fallback, const char* what);
Value attribute_path(RenderHeap& heap, Value v, const Value& path);
Arguments rest_of(const Arguments& args, size_t first);
std::vector<size_t> offsets_of(RenderHeap& heap, std::string_view s);
int64_t length_of(RenderHeap& heap, std::string_view s);
std::string change_case(std::string_view s, bool upper);
std::string title_case(std::string_view s);
std::string capitalize(std::string_view s);
std::string_view strip(RenderHeap& heap, std::string_view s, const Value& chars, bool left, bool right);
Value split(RenderHeap& heap, std::string_view s, const Value& separator, int64_t max_split);
Value replace(RenderHeap& heap, std::string_view s, const Value& old_value, const Value& new_value, const Value& count);
bool starts_or_ends_with(const std::string& s, const Value& affix, bool at_start, const char* method);
bool parse_leading_int(std::string_view s, int64_t& out);
bool parse_leading_float(std::string_view s, double& out);
int64_t double_to_int(double d, int64_t fallback);
Value sorted(RenderHeap& heap, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute);
Value dict_items(RenderHeap& heap, const Dict& dict);
Value dictsort(RenderHeap& heap, const Value& input, const Arguments& args);
std::string strftime(std::string_view format, const CivilTime& now);

}  // namespace moert::text::jinja::builtins
