// JSON parsing for every file and line moert reads (requests, config.json, safetensors
// headers, checkpoint indexes, placements, tokenizer files): nlohmann's parser with two
// rules it does not enforce by itself. Nesting deeper than a limit is an error, so a
// hostile `[[[[...` never drives anything downstream into unbounded recursion; and a key
// repeated inside one object is an error (nlohmann would silently keep the last).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace moert {

inline constexpr int kMaxJsonDepth = 64;

// invalid_argument "SUBJECT is not valid JSON (...)", "SUBJECT is nested deeper than 64 levels"
// or "SUBJECT has duplicate key 'x'" (subject: "header", "index", "the request", ...).
Result<nlohmann::json> parse_strict_json(std::string_view text, const std::string& subject,
                                         int max_depth = kMaxJsonDepth);

// Reads (read_regular_file: links followed, regular files only, at most max_bytes) and parses
// a whole file; not_found / io_error / invalid_argument, each naming the path.
Result<nlohmann::json> read_strict_json_file(const std::string& path, int64_t max_bytes);

// value as an int when it is an integer inside [min, max]; else invalid_argument naming
// `what` and the value as written (2^32 + 4 is not 4, 2^64 - 1 is not -1); an integer past
// 64 bits (kept by the parser only as a rounded double) is named "out of range". The one
// integer parse for every JSON value moert reads (requests, config, placement, headers).
Result<int64_t> json_integer_in_range(const nlohmann::json& value, const std::string& what, int64_t min, int64_t max);

}  // namespace moert
