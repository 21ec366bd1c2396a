#include "text/grammar/json_schema.h"

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "text/grammar/char_class.h"
#include "text/grammar/number_range.h"
#include "text/grammar/regex.h"

namespace moert::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Nesting of schemas deeper than this is refused (the compiler recurses per subschema).
constexpr int kMaxSchemaDepth = 64;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples", "$comment",
                                          "$schema",  "$id",         "deprecated", "readOnly", "writeOnly",
                                          "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& handled_keywords() {
  static const std::set<std::string> k = {
      "type",     "enum",      "const",     "anyOf",            "oneOf",           "$ref",        "properties",
      "required", "additionalProperties",   "items",            "prefixItems",     "minItems",    "maxItems",
      "minLength", "maxLength", "pattern",  "format",           "minimum",         "maximum",     "exclusiveMinimum",
      "exclusiveMaximum",       "nullable", "uniqueItems"};
  return k;
}

ByteSet byte_set_of(std::string_view chars) {
  ByteSet set;
  for (char c : chars) set.set(static_cast<uint8_t>(c));
  return set;
}

ByteSet byte_range_set(char first, char last) {
  ByteSet set;
  for (int c = first; c <= last; ++c) set.set(static_cast<uint8_t>(c));
  return set;
}

// Whether the JSON value `v` has JSON Schema type `type` (integers include 1.0).
bool has_type(const Json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                                     std::isfinite(v.get<double>()));
  }
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonGrammarOptions& options) : root_(root), options_(options) {}

  Result<Grammar> compile_root() {
    if (options_.max_whitespace < 0 || options_.max_whitespace > 64) {
      return invalid_argument("max_whitespace = " + std::to_string(options_.max_whitespace) + " must be in [0, 64]");
    }
    MOERT_ASSIGN_OR_RETURN(Expr body, compile(root_, "#", 0));
    const int root = b_.rule("root");
    MOERT_RETURN_IF_ERROR(b_.define(root, body));
    return b_.build(root);
  }

  Result<Grammar> object_root() {
    const int root = b_.rule("root");
    MOERT_RETURN_IF_ERROR(b_.define(root, any_object()));
    return b_.build(root);
  }

 private:
  // ---- shared JSON rules, defined on first use ----
  // Rule `name`, its body built on first use. A rule being built is referenced, not rebuilt, so
  // bodies may refer to each other (json-value -> json-object -> json-value).
  int shared(const std::string& name, const std::function<Expr()>& body) {
    const int r = b_.rule(name);
    if (!b_.is_defined(r) && building_.insert(r).second) {
      const Expr e = body();
      (void)b_.define(r, e);  // cannot fail: first definition
    }
    return r;
  }
  Expr ws() {
    return ref(shared("ws", [&] { return repeat(bytes_expr(byte_set_of(" \t\n")), 0, options_.max_whitespace); }));
  }
  // One character of a JSON string: unescaped (not '"', '\\' or a control character) or an escape
  // (\uXXXX of a non-surrogate: every character counts as one code point for min/maxLength).
  Expr string_char() {
    return ref(shared("json-char", [&] {
      const ByteSet hex = byte_set_of("0123456789abcdefABCDEF");
      const Expr h = bytes_expr(hex);
      Expr unicode_escape = alt({seq({bytes_expr(byte_set_of("0123456789abcABC")), h, h, h}),
                                 seq({bytes_expr(byte_set_of("dD")), bytes_expr(byte_range_set('0', '7')), h, h}),
                                 seq({bytes_expr(byte_set_of("efEF")), h, h, h})});
      return alt({codepoint_ranges({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}}),
                  seq({byte_expr('\\'), alt({bytes_expr(byte_set_of("\"\\/bfnrt")),
                                             seq({byte_expr('u'), std::move(unicode_escape)})})})});
    }));
  }
  Expr any_string() {
    return ref(shared("json-string", [&] { return seq({byte_expr('"'), repeat(string_char(), 0, -1), byte_expr('"')}); }));
  }
  Expr any_number() {
    return ref(shared("json-number", [&] {
      const Expr digit = bytes_expr(byte_range_set('0', '9'));
      return seq({optional(byte_expr('-')),
                  alt({byte_expr('0'), seq({bytes_expr(byte_range_set('1', '9')), repeat(digit, 0, -1)})}),
                  optional(seq({byte_expr('.'), repeat(digit, 1, -1)})),
                  optional(seq({bytes_expr(byte_set_of("eE")), optional(bytes_expr(byte_set_of("+-"))), repeat(digit, 1, -1)}))});
    }));
  }
  Expr any_object() {
    return ref(shared("json-object", [&] {
      Expr member = seq({any_string(), ws(), byte_expr(':'), ws(), any_value()});
      return seq({byte_expr('{'), ws(),
                  optional(seq({member, ws(), repeat(seq({byte_expr(','), ws(), member, ws()}), 0, -1)})),
                  byte_expr('}')});
    }));
  }
  Expr any_array() {
    return ref(shared("json-array", [&] {
      Expr value = any_value();
      return seq({byte_expr('['), ws(),
                  optional(seq({value, ws(), repeat(seq({byte_expr(','), ws(), value, ws()}), 0, -1)})),
                  byte_expr(']')});
    }));
  }
  Expr any_value() {
    return ref(shared("json-value", [&] {
      return alt({any_object(), any_array(), any_string(), any_number(), literal("true"), literal("false"), literal("null")});
    }));
  }

  // ---- schemas ----
  Status refuse(const std::string& what, const std::string& path) const {
    return unsupported(what + " at " + path);
  }

  Result<Expr> compile(const Json& schema, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) return refuse("schema nested deeper than " + std::to_string(kMaxSchemaDepth), path);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return refuse("the schema false (it matches nothing)", path);
      return any_value();
    }
    if (!schema.is_object()) return invalid_argument("schema at " + path + " must be an object or a boolean");
    for (auto& [key, value] : schema.items()) {
      if (!annotation_keywords().count(key) && !handled_keywords().count(key)) {
        return refuse("unsupported JSON Schema keyword '" + key + "'", path);
      }
    }
    // Keywords that stand alone (beside annotations only).
    for (const char* alone : {"$ref", "anyOf", "oneOf", "enum", "const"}) {
      if (!schema.contains(alone)) continue;
      for (auto& [key, value] : schema.items()) {
        if (key == alone || annotation_keywords().count(key)) continue;
        if ((std::string(alone) == "enum" || std::string(alone) == "const") && (key == "type" || key == "nullable")) continue;
        return refuse("'" + std::string(alone) + "' beside '" + key + "'", path);
      }
    }
    if (schema.contains("$ref")) return compile_ref(schema["$ref"], path, depth);
    if (schema.contains("anyOf") || schema.contains("oneOf")) {
      const std::string key = schema.contains("anyOf") ? "anyOf" : "oneOf";
      const Json& branches = schema[key];
      if (!branches.is_array() || branches.empty()) return invalid_argument("'" + key + "' at " + path + " must be a non-empty array");
      if (key == "oneOf") MOERT_RETURN_IF_ERROR(check_disjoint(branches, path + "/oneOf"));
      std::vector<Expr> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile(branches[i], path + "/" + key + "/" + std::to_string(i), depth + 1));
        alts.push_back(std::move(e));
      }
      return alt(std::move(alts));
    }
    MOERT_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(schema, path));
    if (schema.contains("enum") || schema.contains("const")) {
      const Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
      if (!values.is_array()) return invalid_argument("'enum' at " + path + " must be an array");
      std::vector<Expr> alts;
      for (const Json& v : values) {
        bool typed = false;
        for (const std::string& t : types) typed = typed || has_type(v, t);
        if (typed) alts.push_back(literal(v.dump()));
      }
      if (alts.empty()) return refuse("no 'enum'/'const' value matches the schema's type", path);
      return alt(std::move(alts));
    }
    std::vector<Expr> alts;
    const bool number = std::find(types.begin(), types.end(), "number") != types.end();
    for (const std::string& t : types) {
      if (t == "string") {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile_string(schema, path));
        alts.push_back(std::move(e));
      } else if (t == "integer") {
        if (number) continue;  // number's language holds it
        MOERT_ASSIGN_OR_RETURN(Expr e, compile_integer(schema, path));
        alts.push_back(std::move(e));
      } else if (t == "number") {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile_number(schema, path));
        alts.push_back(std::move(e));
      } else if (t == "boolean") {
        alts.push_back(alt({literal("true"), literal("false")}));
      } else if (t == "null") {
        alts.push_back(literal("null"));
      } else if (t == "object") {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile_object(schema, path, depth));
        alts.push_back(std::move(e));
      } else if (t == "array") {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile_array(schema, path, depth));
        alts.push_back(std::move(e));
      }
    }
    return alt(std::move(alts));
  }

  // The types a schema admits: its "type" (a name or a list; "nullable": true adds null), else
  // those its keywords imply, else every type.
  Result<std::vector<std::string>> types_of(const Json& schema, const std::string& path) {
    static const std::set<std::string> known = {"string", "integer", "number", "boolean", "null", "object", "array"};
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      const Json list = t.is_array() ? t : Json::array({t});
      for (const Json& name : list) {
        if (!name.is_string() || !known.count(name.get<std::string>())) {
          return invalid_argument("'type' " + name.dump() + " at " + path + " is not a JSON Schema type");
        }
        types.push_back(name.get<std::string>());
      }
      if (types.empty()) return invalid_argument("'type' at " + path + " is an empty list");
    } else if (schema.contains("enum") || schema.contains("const")) {
      types = {"string", "number", "boolean", "null", "object", "array"};
    } else {
      const bool object = schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties");
      const bool array = schema.contains("items") || schema.contains("prefixItems") || schema.contains("minItems") || schema.contains("maxItems");
      const bool string = schema.contains("pattern") || schema.contains("format") || schema.contains("minLength") || schema.contains("maxLength");
      const bool integer = schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
                           schema.contains("exclusiveMaximum");
      if (object) types.push_back("object");
      if (array) types.push_back("array");
      if (string) types.push_back("string");
      if (integer) types.push_back("integer");
      if (types.empty()) types = {"object", "array", "string", "number", "boolean", "null"};
    }
    if (schema.contains("nullable")) {
      if (!schema["nullable"].is_boolean()) return invalid_argument("'nullable' at " + path + " must be a boolean");
      if (schema["nullable"].get<bool>() && std::find(types.begin(), types.end(), "null") == types.end()) types.push_back("null");
    }
    return types;
  }

  Result<Expr> compile_ref(const Json& target, const std::string& path, int depth) {
    if (!target.is_string()) return invalid_argument("'$ref' at " + path + " must be a string");
    const std::string pointer = target.get<std::string>();
    if (pointer.empty() || pointer[0] != '#') return refuse("'$ref' " + target.dump() + " (only local '#...' references)", path);
    if (auto it = ref_rules_.find(pointer); it != ref_rules_.end()) return ref(it->second);
    const Json* node = &root_;
    if (pointer.size() > 1) {
      Json::json_pointer p;
      try {
        p = Json::json_pointer(pointer.substr(1));
      } catch (const std::exception&) {
        return invalid_argument("'$ref' " + target.dump() + " at " + path + " is not a JSON pointer");
      }
      if (!root_.contains(p)) return invalid_argument("'$ref' " + target.dump() + " at " + path + " points at nothing");
      node = &root_.at(p);
    }
    const int rule = b_.fresh_rule("ref");
    ref_rules_[pointer] = rule;  // before the body: recursive references find it
    MOERT_ASSIGN_OR_RETURN(Expr body, compile(*node, pointer, depth + 1));
    MOERT_RETURN_IF_ERROR(b_.define(rule, body));
    return ref(rule);
  }

  Result<std::set<std::string>> kinds(const Json& schema, int depth) {
    // The JSON kinds (integer counted as number) a schema can produce, for oneOf's check.
    if (depth > kMaxSchemaDepth) return invalid_argument("'$ref' chain too deep");
    if (!schema.is_object()) return std::set<std::string>{"object", "array", "string", "number", "boolean", "null"};
    if (schema.contains("$ref") && schema["$ref"].is_string()) {
      const std::string pointer = schema["$ref"].get<std::string>();
      if (pointer == "#") return kinds(root_, depth + 1);
      try {
        const Json::json_pointer p(pointer.substr(1));
        if (root_.contains(p)) return kinds(root_.at(p), depth + 1);
      } catch (const std::exception&) {
      }
      return std::set<std::string>{"object", "array", "string", "number", "boolean", "null"};
    }
    std::set<std::string> out;
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key) || !schema[key].is_array()) continue;
      for (const Json& branch : schema[key]) {
        MOERT_ASSIGN_OR_RETURN(std::set<std::string> k, kinds(branch, depth + 1));
        out.insert(k.begin(), k.end());
      }
      return out;
    }
    if (schema.contains("enum") || schema.contains("const")) {
      const Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
      for (const Json& v : values) out.insert(v.is_number() ? "number" : v.is_string() ? "string" : v.is_boolean() ? "boolean"
                                                  : v.is_null() ? "null" : v.is_array() ? "array" : "object");
      return out;
    }
    MOERT_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(schema, "#"));
    for (const std::string& t : types) out.insert(t == "integer" ? "number" : t);
    return out;
  }

  // oneOf is generated as anyOf, which is exact only when no instance matches two branches:
  // accepted when the branches' kinds are pairwise disjoint, or all are objects that require one
  // common property whose const/enum values are pairwise disjoint (a discriminator).
  Status check_disjoint(const Json& branches, const std::string& path) {
    std::vector<std::set<std::string>> all;
    bool by_kind = true;
    for (const Json& branch : branches) {
      MOERT_ASSIGN_OR_RETURN(std::set<std::string> k, kinds(branch, 0));
      for (const auto& other : all) {
        for (const std::string& kind : k) by_kind = by_kind && !other.count(kind);
      }
      all.push_back(std::move(k));
    }
    if (by_kind) return Status::ok();
    // A discriminator: a property required by every branch, with const/enum values.
    if (!branches[0].is_object() || !branches[0].contains("properties") || !branches[0]["properties"].is_object()) {
      return refuse("'oneOf' whose branches may overlap (use anyOf, or disjoint types or a const discriminator)", path);
    }
    for (auto& [name, unused] : branches[0]["properties"].items()) {
      std::set<std::string> seen;
      bool ok = true;
      for (const Json& branch : branches) {
        const bool required = branch.is_object() && branch.contains("required") && branch["required"].is_array() &&
                              std::find(branch["required"].begin(), branch["required"].end(), Json(name)) != branch["required"].end();
        const Json* prop = branch.is_object() && branch.contains("properties") && branch["properties"].is_object() &&
                                   branch["properties"].contains(name) ? &branch["properties"][name] : nullptr;
        if (!required || prop == nullptr || !prop->is_object() || (!prop->contains("const") && !prop->contains("enum"))) {
          ok = false;
          break;
        }
        const Json values = prop->contains("const") ? Json::array({(*prop)["const"]}) : (*prop)["enum"];
        for (const Json& v : values) ok = ok && seen.insert(v.dump()).second;
        if (!ok) break;
      }
      if (ok) return Status::ok();
    }
    return refuse("'oneOf' whose branches may overlap (use anyOf, or disjoint types or a const discriminator)", path);
  }

  Result<int64_t> integer_keyword(const Json& schema, const char* key, const std::string& path) {
    const Json& v = schema[key];
    if (!v.is_number()) return refuse(std::string("'") + key + "' = " + v.dump() + " (a number is needed)", path);
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxIntegerBound)) {
      return refuse(std::string("'") + key + "' = " + v.dump() + " beyond +-1e15", path);
    }
    return static_cast<int64_t>(d);  // exact after the caller's floor/ceil handling below
  }

  Result<Expr> compile_integer(const Json& schema, const std::string& path) {
    std::optional<int64_t> lo, hi;
    const auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
      if (!schema.contains(key)) return Status::ok();
      MOERT_ASSIGN_OR_RETURN(const int64_t unused, integer_keyword(schema, key, path));
      (void)unused;
      const double d = schema[key].get<double>();
      int64_t v = lower ? static_cast<int64_t>(std::ceil(d)) : static_cast<int64_t>(std::floor(d));
      if (exclusive && static_cast<double>(v) == d) v += lower ? 1 : -1;
      if (lower) lo = lo ? std::max(*lo, v) : v;
      else hi = hi ? std::min(*hi, v) : v;
      return Status::ok();
    };
    MOERT_RETURN_IF_ERROR(bound("minimum", true, false));
    MOERT_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
    MOERT_RETURN_IF_ERROR(bound("maximum", false, false));
    MOERT_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
    if (lo && hi && *lo > *hi) return refuse("integer bounds that no integer satisfies", path);
    return integer_range_expr(lo, hi);
  }

  // Numbers with whole-number bounds (docs/structured-output.md §JSON Schema): the integers in
  // range, and decimals without exponent whose fraction ends in a non-zero digit, so that "k.f"
  // (k >= 0) lies strictly inside (k, k + 1) and "-k.f" strictly inside (-(k + 1), -k). Such a
  // decimal is valid exactly when that open interval lies within [L, H], whether the bounds are
  // inclusive or exclusive. Fractional bounds are refused by name.
  Result<Expr> compile_number(const Json& schema, const std::string& path) {
    // low/high: the tightest bounds as written (L, H); int_low/int_high: the integers' bounds.
    std::optional<int64_t> low, high, int_low, int_high;
    const auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
      if (!schema.contains(key)) return Status::ok();
      MOERT_ASSIGN_OR_RETURN(const int64_t v, integer_keyword(schema, key, path));
      if (static_cast<double>(v) != schema[key].get<double>()) {
        return refuse(std::string("'") + key + "' = " + schema[key].dump() + " on type number (only whole-number bounds)", path);
      }
      const int64_t as_int = exclusive ? (lower ? v + 1 : v - 1) : v;
      if (lower) {
        low = low ? std::max(*low, v) : v;
        int_low = int_low ? std::max(*int_low, as_int) : as_int;
      } else {
        high = high ? std::min(*high, v) : v;
        int_high = int_high ? std::min(*int_high, as_int) : as_int;
      }
      return Status::ok();
    };
    MOERT_RETURN_IF_ERROR(bound("minimum", true, false));
    MOERT_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
    MOERT_RETURN_IF_ERROR(bound("maximum", false, false));
    MOERT_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
    if (!low && !high) return any_number();
    const Expr digit = bytes_expr(byte_range_set('0', '9'));
    const auto fraction = [&] { return seq({byte_expr('.'), repeat(digit, 0, -1), bytes_expr(byte_range_set('1', '9'))}); };
    std::vector<Expr> alts;
    if (!int_low || !int_high || *int_low <= *int_high) alts.push_back(integer_range_expr(int_low, int_high));
    // "k.f", k >= 0, with L <= k and k + 1 <= H.
    const int64_t k_lo = std::max<int64_t>(0, low.value_or(0));
    if (!high || *high - 1 >= k_lo) {
      alts.push_back(seq({integer_range_expr(k_lo, high ? std::optional<int64_t>(*high - 1) : std::nullopt), fraction()}));
    }
    // "-k.f", k >= 0, with L <= -(k + 1) and -k <= H.
    const int64_t m_lo = std::max<int64_t>(0, high ? -*high : 0);
    if (!low || -*low - 1 >= m_lo) {
      alts.push_back(seq({byte_expr('-'), integer_range_expr(m_lo, low ? std::optional<int64_t>(-*low - 1) : std::nullopt),
                          fraction()}));
    }
    if (alts.empty()) return refuse("number bounds that no number satisfies", path);
    return alt(std::move(alts));
  }

  Result<int> count_keyword(const Json& schema, const char* key, const std::string& path, int max) {
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return invalid_argument(std::string("'") + key + "' at " + path + " must be a non-negative integer");
    if (v.get<int64_t>() > max) return refuse(std::string("'") + key + "' = " + v.dump() + " above " + std::to_string(max), path);
    return static_cast<int>(v.get<int64_t>());
  }

  Result<Expr> compile_string(const Json& schema, const std::string& path) {
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("format")) {
      if (!schema["format"].is_string()) return invalid_argument("'format' at " + path + " must be a string");
      const std::string format = schema["format"].get<std::string>();
      const std::string regex = json_format_regex(format);
      if (regex.empty()) return refuse("string format '" + format + "'", path);
      if (lengths || schema.contains("pattern")) return refuse("'format' together with 'pattern' or a length bound", path);
      MOERT_ASSIGN_OR_RETURN(Expr e, compile_regex(regex, RegexTarget::kJsonString));
      return seq({byte_expr('"'), std::move(e), byte_expr('"')});
    }
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) return invalid_argument("'pattern' at " + path + " must be a string");
      if (lengths) return refuse("'pattern' together with a length bound", path);
      Result<Expr> e = compile_regex(schema["pattern"].get<std::string>(), RegexTarget::kJsonString);
      if (!e.is_ok()) return refuse("'pattern' " + schema["pattern"].dump() + ": " + e.status().message(), path);
      return seq({byte_expr('"'), std::move(e).value(), byte_expr('"')});
    }
    int min = 0, max = -1;
    if (schema.contains("minLength")) {
      MOERT_ASSIGN_OR_RETURN(min, count_keyword(schema, "minLength", path, 10000));
    }
    if (schema.contains("maxLength")) {
      MOERT_ASSIGN_OR_RETURN(max, count_keyword(schema, "maxLength", path, 10000));
    }
    if (max >= 0 && max < min) return refuse("'minLength' above 'maxLength'", path);
    if (min == 0 && max < 0) return any_string();
    return seq({byte_expr('"'), repeat(string_char(), min, max), byte_expr('"')});
  }

  Result<Expr> compile_object(const Json& schema, const std::string& path, int depth) {
    // (name, schema, required) in the order `properties` lists them, then required names it lacks.
    struct Property {
      std::string name;
      const Json* schema;
      bool required;
    };
    std::vector<Property> props;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) return invalid_argument("'required' at " + path + " must be an array");
      for (const Json& r : schema["required"]) {
        if (!r.is_string()) return invalid_argument("'required' at " + path + " must list strings");
        required.insert(r.get<std::string>());
      }
    }
    const Json* additional = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    static const Json kAny = Json::object();
    if (schema.contains("properties")) {
      if (!schema["properties"].is_object()) return invalid_argument("'properties' at " + path + " must be an object");
      for (auto& [name, sub] : schema["properties"].items()) props.push_back({name, &sub, required.count(name) > 0});
    }
    const bool closed = additional != nullptr && additional->is_boolean() && !additional->get<bool>();
    for (const std::string& name : required) {
      if (schema.contains("properties") && schema["properties"].contains(name)) continue;
      if (closed) return refuse("required property '" + name + "' that additionalProperties false forbids", path);
      props.push_back({name, additional != nullptr && additional->is_object() ? additional : &kAny, true});
    }
    if (props.empty() && !closed) {
      if (additional == nullptr || additional->is_boolean()) return any_object();
      // Any keys, values of the additionalProperties schema.
      MOERT_ASSIGN_OR_RETURN(Expr value, compile(*additional, path + "/additionalProperties", depth + 1));
      Expr member = seq({any_string(), ws(), byte_expr(':'), ws(), std::move(value)});
      return seq({byte_expr('{'), ws(), optional(seq({member, ws(), repeat(seq({byte_expr(','), ws(), member, ws()}), 0, -1)})),
                  byte_expr('}')});
    }
    // after[i][any]: the members from property i on, `any` telling whether one was written.
    std::vector<Expr> members;
    for (const Property& p : props) {
      MOERT_ASSIGN_OR_RETURN(Expr value, compile(*p.schema, path + "/properties/" + p.name, depth + 1));
      members.push_back(seq({literal(Json(p.name).dump()), ws(), byte_expr(':'), ws(), std::move(value), ws()}));
    }
    const int n = static_cast<int>(props.size());
    std::vector<std::array<int, 2>> rules(static_cast<size_t>(n) + 1);
    for (int i = 0; i <= n; ++i) rules[static_cast<size_t>(i)] = {b_.fresh_rule("members"), b_.fresh_rule("members")};
    for (int i = n; i >= 0; --i) {
      for (int any = 0; any < 2; ++any) {
        Expr body;
        if (i == n) {
          body = seq({});
        } else {
          Expr take = seq({any ? seq({byte_expr(','), ws()}) : seq({}), members[static_cast<size_t>(i)],
                           ref(rules[static_cast<size_t>(i) + 1][1])});
          body = props[static_cast<size_t>(i)].required ? std::move(take)
                                                       : alt({std::move(take), ref(rules[static_cast<size_t>(i) + 1][static_cast<size_t>(any)])});
        }
        MOERT_RETURN_IF_ERROR(b_.define(rules[static_cast<size_t>(i)][static_cast<size_t>(any)], body));
      }
    }
    return seq({byte_expr('{'), ws(), ref(rules[0][0]), byte_expr('}')});
  }

  Result<Expr> compile_array(const Json& schema, const std::string& path, int depth) {
    if (schema.contains("uniqueItems") && schema["uniqueItems"] != Json(false)) return refuse("'uniqueItems' true", path);
    int min = 0, max = -1;
    if (schema.contains("minItems")) {
      MOERT_ASSIGN_OR_RETURN(min, count_keyword(schema, "minItems", path, 10000));
    }
    if (schema.contains("maxItems")) {
      MOERT_ASSIGN_OR_RETURN(max, count_keyword(schema, "maxItems", path, 10000));
    }
    if (max >= 0 && max < min) return refuse("'minItems' above 'maxItems'", path);
    std::vector<Expr> prefix;
    if (schema.contains("prefixItems")) {
      if (!schema["prefixItems"].is_array()) return invalid_argument("'prefixItems' at " + path + " must be an array");
      for (size_t i = 0; i < schema["prefixItems"].size(); ++i) {
        MOERT_ASSIGN_OR_RETURN(Expr e, compile(schema["prefixItems"][i], path + "/prefixItems/" + std::to_string(i), depth + 1));
        prefix.push_back(std::move(e));
      }
    }
    const int k = static_cast<int>(prefix.size());
    if (max >= 0 && max < k) return refuse("'maxItems' below the number of 'prefixItems'", path);
    Expr item;
    bool more = true;
    if (schema.contains("items")) {
      if (schema["items"] == Json(false)) {
        more = false;
      } else {
        MOERT_ASSIGN_OR_RETURN(item, compile(schema["items"], path + "/items", depth + 1));
      }
    } else {
      item = any_value();
    }
    const int rest_min = std::max(0, min - k);
    const int rest_max = !more ? 0 : (max < 0 ? -1 : max - k);
    if (rest_min > 0 && !more) return refuse("'minItems' above the number of 'prefixItems' with items false", path);
    // Every item after the first is ", item".
    std::vector<Expr> parts{byte_expr('['), ws()};
    bool first = true;
    for (Expr& p : prefix) {
      if (!first) parts.push_back(seq({byte_expr(','), ws()}));
      parts.push_back(std::move(p));
      parts.push_back(ws());
      first = false;
    }
    if (rest_max != 0) {
      const Expr next = seq({byte_expr(','), ws(), item, ws()});
      if (!first) {
        parts.push_back(repeat(next, rest_min, rest_max));
      } else {
        Expr list = seq({item, ws(), repeat(next, std::max(0, rest_min - 1), rest_max < 0 ? -1 : rest_max - 1)});
        parts.push_back(rest_min > 0 ? std::move(list) : optional(std::move(list)));
      }
    }
    parts.push_back(byte_expr(']'));
    return seq(std::move(parts));
  }

 private:
  const Json& root_;
  JsonGrammarOptions options_;
  GrammarBuilder b_;
  std::map<std::string, int> ref_rules_;
  std::set<int> building_;
};

}  // namespace

std::string json_format_regex(const std::string& format) {
  // Subsets of what ajv-formats' full mode accepts (lower-case only where it ignores case).
  static const std::string kYear = "[0-9]{4}";
  static const std::string kLeapYear = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)";
  static const std::string kDate = "(?:" + kYear + "-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|" + kYear +
                                   "-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|" + kYear + "-02-(?:0[1-9]|1[0-9]|2[0-8])|" +
                                   kLeapYear + "-02-29)";
  static const std::string kTime = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return kDate + "T" + kTime;
  if (format == "email") {
    return "[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\\.)+"
           "[a-z0-9](?:[a-z0-9-]*[a-z0-9])?";
  }
  if (format == "uuid") return "[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}";
  if (format == "ipv4") return "(?:" + kOctet + "\\.){3}" + kOctet;
  if (format == "ipv6") return "(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}";
  if (format == "uri") return "[a-z][a-z0-9+.-]*://(?:[a-z0-9-]+\\.)*[a-z0-9-]+(?:/[a-z0-9._~-]*)*";
  return "";
}

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  return SchemaCompiler(schema, options).compile_root();
}

Result<Grammar> compile_json_object(const JsonGrammarOptions& options) {
  static const nlohmann::ordered_json kEmpty = nlohmann::ordered_json::object();
  return SchemaCompiler(kEmpty, options).object_root();
}

Result<Grammar> compile_choice(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("'guided_choice' is an empty list");
  std::vector<Expr> alts;
  for (const std::string& c : choices) alts.push_back(literal(c));
  GrammarBuilder builder;
  const int root = builder.rule("root");
  MOERT_RETURN_IF_ERROR(builder.define(root, alt(std::move(alts))));
  return builder.build(root);
}

}  // namespace moert::grammar
