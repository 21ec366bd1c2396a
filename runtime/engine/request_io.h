// JSONL requests and results for `moert run`.
// Input, one request a line:
//   {"id": "r1", "prompt_token_ids": [5, 9, 2], "max_tokens": 32, "temperature": 0,
//    "top_p": 1, "top_k": 0, "seed": 7, "n": 1, "stop_token_ids": []}
// (all but id and prompt_token_ids optional; temperature 0 = greedy). Output, one line per
// finished request, written whole and flushed:
//   {"id": "r1", "outputs": [{"token_ids": [...], "finish_reason": "length"}],
//    "prompt_tokens": 3, "output_tokens": 32, "cached_prompt_tokens": 0, "num_preemptions": 0, "time_s": 0.12}
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>

#include "core/status.h"
#include "runtime/engine/engine.h"

namespace moert::engine {

// Parses one input line; errors name the field ("'top_p' = 1.5 must be in (0, 1]").
// Unknown keys are rejected so that typos do not silently fall back to defaults.
Result<Request> parse_request_line(const std::string& line);
std::string format_output_line(const RequestOutput& output);

// The ids already in an existing output file (a rerun skips them), as JSON text (compare with
// Request::id_json). A missing file is empty; a torn last line (the job was killed mid-write)
// is ignored and reported in *torn_lines.
Result<std::unordered_set<std::string>> read_finished_ids(const std::string& path, int* torn_lines);



}  // namespace moert::engine
