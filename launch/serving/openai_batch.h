// OpenAI Batch API files (docs/requests.md, "OpenAI batch files"). An input line
//   {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions",
//    "body": {"model": ..., "messages": [...] | "prompt": ..., "max_tokens": ..., ...}}
// becomes one of moert's requests (request_io.h) plus an "openai" object that remembers what
// the output needs (rank 0 keeps it beside the request); its result line has the OpenAI batch
// output shape
//   {"id": "batch_req_...", "custom_id": "r1", "response": {"status_code": 200, "request_id": ...,
//    "body": {chat.completion | text_completion object}}, "error": null}
// and a line that cannot be served gets {"id", "custom_id", "response": null, "error": {"code", "message"}}.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/token_text.h"

namespace moert::serving {

using engine::RequestOutput;
using engine::SampleOutput;
using engine::TokenText;

// True for a line in the OpenAI batch shape (it has "custom_id" or "body").
bool is_openai_batch_line(const nlohmann::json& line);

// The request of an OpenAI batch line in moert's keys: "id" (the custom_id), the sampling
// keys, "prompt" (text), "prompt_token_ids" or "messages" (+ "tools", "chat_template_kwargs",
// "add_generation_prompt" for the chat template), and "openai": {"custom_id", "endpoint"
// ("chat" or "completions"), "model", "created"}. A chat body without max_tokens gets none here
// (the reader fills in what the context leaves). Errors name the field; body fields moert does
// not implement are refused by name rather than ignored.
Result<nlohmann::json> openai_to_request(const nlohmann::json& line, int64_t created);

// The custom_id of a line as JSON text ("null" when it has none), for error lines.
std::string openai_custom_id_json(const nlohmann::json& line);

// The result line of a finished request that came from an OpenAI batch line; `openai_json` is
// the "openai" object openai_to_request made for that line.
std::string format_openai_output(const RequestOutput& output, const std::string& openai_json, const TokenText* text);
// The error line for a failed OpenAI batch line (custom_id_json as openai_custom_id_json).
std::string format_openai_error(const std::string& custom_id_json, const std::string& message, int line_number);

}  // namespace moert::serving
