// JSONL requests and results for `moert run` (docs/requests.md).
// Input, one request a line (every key but id and prompt_token_ids optional):
//   {"id": "r1", "prompt_token_ids": [5, 9, 2], "max_tokens": 32, "temperature": 0, "top_p": 1,
//    "top_k": 0, "seed": 7, "n": 1, "stop_token_ids": [], "stop": ["\n\n"], "ignore_eos": false,
//    "min_tokens": 0, "presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1,
//    "logprobs": 2}
// (temperature 0 = greedy). "prompt" (text) and "messages" (a chat) are turned into
// prompt_token_ids on rank 0 (launch/serving/request_reader.h) before this parser sees the
// line; OpenAI batch lines are translated there too (openai_batch.h), and rank 0 keeps what
// their results need (the "openai" object) beside the request, not in it.
// Output, one line per finished request, written whole and flushed:
//   {"id": "r1", "outputs": [{"token_ids": [...], "finish_reason": "length", "text": "..."}],
//    "prompt_tokens": 3, "output_tokens": 32, "cached_prompt_tokens": 0, "num_preemptions": 0, "time_s": 0.12, ...}
// or, for a line that failed, {"id": ..., "error": {"message": ..., "line": N}}.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/token_text.h"

namespace moert::serving {

using engine::Request;
using engine::RequestOutput;
using engine::SampleOutput;
using engine::TokenText;

// Parses one input line; errors name the field ("'top_p' = 1.5 must be in (0, 1]").
// Unknown keys are rejected so that typos do not silently fall back to defaults.
Result<Request> parse_request_line(const std::string& line);
// The same from a parsed line.
Result<Request> parse_request(const nlohmann::json& j);
// The result line of `output`: moert's format, or, when `openai_json` is not empty (the
// "openai" object openai_to_request made for the request's line), the OpenAI batch output
// shape. `text` (may be null) names tokens in log-probabilities.
std::string format_output_line(const RequestOutput& output, const std::string& openai_json = {},
                               const TokenText* text = nullptr);
// The line written for an input line that cannot be served: `id_json` is the request's id
// (or custom_id) as JSON, "null" when unknown.
std::string format_error_line(const std::string& id_json, const std::string& message, int line_number,
                              bool openai_shape);

// The ids already in an existing output file (a rerun skips them), as JSON text (compare with
// Request::id_json): request ids of results and error lines, custom_ids of OpenAI lines, and
// error_line_key(N) for the error line of input line N when its id could not be read. A
// missing file is empty; a torn last line (the job was killed mid-write) is ignored and
// reported in *torn_lines.
std::string error_line_key(const std::string& line_number);
Result<std::unordered_set<std::string>> read_finished_ids(const std::string& path, int* torn_lines);

}  // namespace moert::serving
