#include "core/strict_json.h"

#include "core/regular_file.h"

#include <cmath>
#include <set>
#include <vector>

namespace moert {
namespace {

using nlohmann::json;

struct StopParsing {
  std::string reason;
};

}  // namespace

Result<json> parse_strict_json(std::string_view text, const std::string& subject, int max_depth) {
  std::vector<std::set<std::string>> keys;  // one key set per open object
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= max_depth) throw StopParsing{" is nested deeper than " + std::to_string(max_depth) + " levels"};
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() && !keys.back().insert(parsed.get<std::string>()).second) {
          throw StopParsing{" has duplicate key '" + parsed.get<std::string>() + "'"};
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
  } catch (const StopParsing& stop) {
    return invalid_argument(subject + stop.reason);
  } catch (const json::exception& e) {
    return invalid_argument(subject + " is not valid JSON (" + e.what() + ")");
  }
}

Result<json> read_strict_json_file(const std::string& path, int64_t max_bytes) {
  MOERT_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path, max_bytes, "a JSON file"));
  return parse_strict_json(text, path);
}

Result<int64_t> json_integer_in_range(const json& value, const std::string& what, int64_t min, int64_t max) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();  // v <= max <= INT64_MAX makes the cast exact
    if (max >= 0 && v <= static_cast<uint64_t>(max) && static_cast<int64_t>(v) >= min) return static_cast<int64_t>(v);
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= min && v <= max) return v;
  } else if (value.is_number_float() && std::isfinite(value.get<double>()) &&
             value.get<double>() == std::floor(value.get<double>()) && std::fabs(value.get<double>()) >= 0x1p63) {
    // An integer past 64 bits, which the parser could keep only as a double: its spelling is
    // gone, so it is named as out of range rather than by a rounded value.
    return invalid_argument(what + " is an integer out of range (outside [" + std::to_string(min) + ", " +
                            std::to_string(max) + "])");
  } else {
    return invalid_argument(what + " = " + value.dump() + " must be an integer");
  }
  return invalid_argument(what + " = " + value.dump() + " is outside [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
}

}  // namespace moert
