#include "launch/serving/request_io.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/strict_json.h"
#include "launch/serving/openai_batch.h"

namespace moert::serving {
namespace {

using nlohmann::json;

Result<std::vector<int32_t>> int_list(const json& j, const std::string& key) {
  if (!j.is_array()) return invalid_argument("'" + key + "' must be a list of integers");
  std::vector<int32_t> values;
  for (size_t i = 0; i < j.size(); ++i) {
    // The value as written in every message: 2^64 - 1 is not -1.
    MOERT_ASSIGN_OR_RETURN(const int64_t id, json_integer_in_range(j[i], "'" + key + "'[" + std::to_string(i) + "]",
                                                                    INT32_MIN, INT32_MAX));
    values.push_back(static_cast<int32_t>(id));
  }
  return values;
}

Result<float> number(const json& j, const std::string& key) {
  if (!j.is_number()) return invalid_argument("'" + key + "' = " + j.dump() + " must be a number");
  return static_cast<float>(j.get<double>());
}

Result<int> int32_value(const json& j, const std::string& key) {
  MOERT_ASSIGN_OR_RETURN(int64_t v, json_integer_in_range(j, "'" + key + "'", INT32_MIN, INT32_MAX));
  return static_cast<int>(v);
}

// "stop": a string or a list of strings (OpenAI allows both; null is none).
Result<std::vector<std::string>> stop_strings(const json& j) {
  if (j.is_null()) return std::vector<std::string>{};
  if (j.is_string()) return std::vector<std::string>{j.get<std::string>()};
  if (!j.is_array()) return invalid_argument("'stop' must be a string or a list of strings");
  std::vector<std::string> stops;
  for (const json& s : j) {
    if (!s.is_string()) return invalid_argument("'stop' must be a string or a list of strings, got " + s.dump());
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

// Sets the request's output constraint; a second one is an error naming both.
Status set_guided(sampling::SamplingParams& p, const std::string& key, std::string kind, std::string spec) {
  if (p.is_guided()) return invalid_argument("'" + key + "' and another constraint (response_format, guided_*) in one request");
  p.guided_kind = std::move(kind);
  p.guided_spec = std::move(spec);
  return Status::ok();
}

// OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}} (docs/structured-output.md).
Status read_response_format(const json& value, sampling::SamplingParams& p) {
  if (value.is_null()) return Status::ok();
  if (!value.is_object() || !value.contains("type") || !value["type"].is_string()) {
    return invalid_argument("'response_format' must be an object with a string 'type'");
  }
  const std::string type = value["type"].get<std::string>();
  for (auto& [key, unused] : value.items()) {
    if (key != "type" && !(type == "json_schema" && key == "json_schema")) {
      return invalid_argument("unknown key 'response_format." + key + "'");
    }
  }
  if (type == "text") return Status::ok();
  if (type == "json_object") return set_guided(p, "response_format", "json_object", "");
  if (type != "json_schema") {
    return invalid_argument("'response_format.type' = " + value["type"].dump() + " is not text, json_object or json_schema");
  }
  if (!value.contains("json_schema") || !value["json_schema"].is_object()) {
    return invalid_argument("'response_format.json_schema' must be an object");
  }
  const json& spec = value["json_schema"];
  for (auto& [key, field] : spec.items()) {
    if (key == "name" || key == "description") {
      if (!field.is_string()) return invalid_argument("'response_format.json_schema." + key + "' must be a string");
    } else if (key == "strict") {
      if (!field.is_boolean() && !field.is_null()) return invalid_argument("'response_format.json_schema.strict' must be a boolean");
    } else if (key != "schema") {
      return invalid_argument("unknown key 'response_format.json_schema." + key + "'");
    }
  }
  if (!spec.contains("schema")) return invalid_argument("'response_format.json_schema' lacks 'schema'");
  if (!spec["schema"].is_object() && !spec["schema"].is_boolean()) {
    return invalid_argument("'response_format.json_schema.schema' must be an object");
  }
  return set_guided(p, "response_format", "json_schema", spec["schema"].dump());
}

// vLLM's extra parameters guided_json (a schema object or its text), guided_regex,
// guided_grammar (GBNF text) and guided_choice (a list of strings).
Status read_guided_key(const std::string& key, const json& value, sampling::SamplingParams& p) {
  if (value.is_null()) return Status::ok();
  if (key == "guided_json") {
    if (value.is_string()) return set_guided(p, key, "json_schema", value.get<std::string>());
    if (!value.is_object() && !value.is_boolean()) return invalid_argument("'guided_json' must be a schema object or its JSON text");
    return set_guided(p, key, "json_schema", value.dump());
  }
  if (key == "guided_choice") {
    if (!value.is_array() || value.empty()) return invalid_argument("'guided_choice' must be a non-empty list of strings");
    for (const json& c : value) {
      if (!c.is_string()) return invalid_argument("'guided_choice' must be a list of strings, got " + c.dump());
    }
    return set_guided(p, key, "choice", value.dump());
  }
  if (!value.is_string()) return invalid_argument("'" + key + "' must be a string");
  return set_guided(p, key, key == "guided_regex" ? "regex" : "grammar", value.get<std::string>());
}

// Reads one request key into `request`.
Status read_key(const std::string& key, const json& value, Request& request) {
  sampling::SamplingParams& p = request.params;
  if (key == "prompt_token_ids") {
    MOERT_ASSIGN_OR_RETURN(request.prompt, int_list(value, key));
  } else if (key == "stop_token_ids") {
    MOERT_ASSIGN_OR_RETURN(p.stop_token_ids, int_list(value, key));
  } else if (key == "stop") {
    MOERT_ASSIGN_OR_RETURN(p.stop, stop_strings(value));
  } else if (key == "temperature") {
    MOERT_ASSIGN_OR_RETURN(p.temperature, number(value, key));
  } else if (key == "top_p") {
    MOERT_ASSIGN_OR_RETURN(p.top_p, number(value, key));
  } else if (key == "presence_penalty") {
    MOERT_ASSIGN_OR_RETURN(p.presence_penalty, number(value, key));
  } else if (key == "frequency_penalty") {
    MOERT_ASSIGN_OR_RETURN(p.frequency_penalty, number(value, key));
  } else if (key == "repetition_penalty") {
    MOERT_ASSIGN_OR_RETURN(p.repetition_penalty, number(value, key));
  } else if (key == "top_k") {
    MOERT_ASSIGN_OR_RETURN(p.top_k, int32_value(value, key));
  } else if (key == "n") {
    MOERT_ASSIGN_OR_RETURN(p.n, int32_value(value, key));
  } else if (key == "max_tokens") {
    MOERT_ASSIGN_OR_RETURN(p.max_tokens, int32_value(value, key));
  } else if (key == "min_tokens") {
    MOERT_ASSIGN_OR_RETURN(p.min_tokens, int32_value(value, key));
  } else if (key == "logprobs") {
    if (!value.is_null()) {
      MOERT_ASSIGN_OR_RETURN(p.logprobs, int32_value(value, key));
    }
  } else if (key == "seed") {
    // -1 or null: none (the request's id gives the seed).
    if (!value.is_null()) {
      MOERT_ASSIGN_OR_RETURN(p.seed, json_integer_in_range(value, "'seed'", -1, INT64_MAX));
    }
  } else if (key == "ignore_eos") {
    if (!value.is_boolean()) return invalid_argument("'ignore_eos' = " + value.dump() + " must be true or false");
    p.ignore_eos = value.get<bool>();
  } else if (key == "response_format") {
    return read_response_format(value, p);
  } else if (key == "guided_json" || key == "guided_regex" || key == "guided_grammar" || key == "guided_choice") {
    return read_guided_key(key, value, p);
  } else if (key == "prompt" || key == "messages") {
    return invalid_argument("'" + key + "' needs the checkpoint's tokenizer" +
                            (key == "messages" ? std::string(" and chat template") : std::string()) +
                            " (tokenizer.json); give 'prompt_token_ids'");
  } else {
    return invalid_argument("unknown key '" + key + "'");
  }
  return Status::ok();
}

}  // namespace

Result<Request> parse_request_line(const std::string& line) {
  MOERT_ASSIGN_OR_RETURN(json j, parse_strict_json(line, "the request"));
  return parse_request(j);
}

Result<Request> parse_request(const json& j) {
  if (!j.is_object()) return invalid_argument("a request must be a JSON object");
  Request request;
  if (!j.contains("id")) return invalid_argument("missing 'id'");
  // Any JSON value but null identifies the request; it comes back as given (its JSON form).
  if (j["id"].is_null()) return invalid_argument("'id' is null");
  request.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  request.id_json = j["id"].dump();
  const std::string who = "request '" + request.id + "'";
  for (auto& [key, value] : j.items()) {
    if (key == "id") continue;
    MOERT_RETURN_IF_ERROR(read_key(key, value, request).with_context(who));
  }
  if (!j.contains("prompt_token_ids")) return invalid_argument(who + " lacks 'prompt_token_ids'");
  MOERT_RETURN_IF_ERROR(sampling::validate_sampling_params(request.params).with_context(who));
  // A string id's text, or another id's JSON form hashed from another basis: 7 and "7" are two
  // requests and draw differently (docs/requests.md); string ids keep the seeds they always had.
  request.default_seed =
      j["id"].is_string() ? fnv1a_64(request.id) : fnv1a_64(request.id_json, fnv1a_64("moert: a non-string id"));
  return request;
}

namespace {

double rounded_seconds(double s) { return std::round(s * 1e6) / 1e6; }

json native_logprobs(const std::vector<sampling::TokenLogprob>& logprobs) {
  json entries = json::array();
  for (const sampling::TokenLogprob& entry : logprobs) {
    json top = json::array();
    for (const auto& [id, logprob] : entry.top) top.push_back({id, logprob});
    entries.push_back({{"token_id", entry.token}, {"logprob", entry.logprob}, {"top", top}});
  }
  return entries;
}

}  // namespace

std::string format_output_line(const RequestOutput& output, const std::string& openai_json, const TokenText* text) {
  if (!openai_json.empty()) return format_openai_output(output, openai_json, text);
  json outputs = json::array();
  for (const SampleOutput& sample : output.outputs) {
    json o = {{"token_ids", sample.token_ids}, {"finish_reason", sample.finish_reason}};
    if (sample.text.has_value()) o["text"] = *sample.text;
    if (sample.stop_string.has_value()) o["stop_reason"] = *sample.stop_string;
    if (sample.stop_token.has_value()) o["stop_reason"] = *sample.stop_token;
    if (!sample.logprobs.empty()) o["logprobs"] = native_logprobs(sample.logprobs);
    outputs.push_back(std::move(o));
  }
  json j = {{"id", output.id_json.empty() ? json(output.id) : json::parse(output.id_json)},
            {"outputs", outputs},
            {"prompt_tokens", output.prompt_tokens},
            {"output_tokens", output.output_tokens},
            {"cached_prompt_tokens", output.cached_prompt_tokens},
            {"num_preemptions", output.num_preemptions},
            {"time_s", rounded_seconds(output.time_s)},
            {"queue_s", rounded_seconds(output.queue_s)},
            {"ttft_s", rounded_seconds(output.ttft_s)},
            {"e2e_s", rounded_seconds(output.e2e_s)}};
  if (!output.token_times_s.empty()) {
    json times = json::array();
    for (double t : output.token_times_s) times.push_back(rounded_seconds(t));
    j["token_times_s"] = times;
  }
  // Generated text may end inside a character only when cut by max_tokens; such bytes become U+FFFD.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string format_error_line(const std::string& id_json, const std::string& message, int line_number,
                              bool openai_shape) {
  if (openai_shape) return format_openai_error(id_json, message, line_number);
  const json j = {{"id", json::parse(id_json)}, {"error", {{"message", message}, {"line", line_number}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_line_key(const std::string& line_number) { return "line:" + line_number; }

Result<std::unordered_set<std::string>> read_finished_ids(const std::string& path, int* torn_lines) {
  std::unordered_set<std::string> ids;
  *torn_lines = 0;
  std::ifstream in(path);
  if (!in) return ids;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    const bool openai = !j.is_discarded() && j.is_object() && j.contains("custom_id");
    const bool result = !j.is_discarded() && j.is_object() && j.contains("id") &&
                        (j.contains("outputs") || j.contains("error") || openai);
    if (!result) {
      ++*torn_lines;
      continue;
    }
    const json& id = openai ? j["custom_id"] : j["id"];
    if (!id.is_null()) {
      ids.insert(id.dump());
    } else if (j.contains("error") && j["error"].is_object() && j["error"].contains("line")) {
      ids.insert(error_line_key(j["error"]["line"].dump()));  // a line whose id could not be read
    }
  }
  return ids;
}

}  // namespace moert::serving
