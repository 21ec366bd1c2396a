#include "runtime/engine/request_io.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/strict_json.h"

namespace moert::engine {
namespace {

using nlohmann::json;

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) hash = (hash ^ ch) * 0x100000001b3ull;
  return hash;
}

Result<std::vector<int32_t>> int_list(const json& j, const char* key) {
  if (!j.is_array()) return invalid_argument(std::string("'") + key + "' must be a list of integers");
  std::vector<int32_t> values;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < INT32_MIN || j[i].get<int64_t>() > INT32_MAX) {
      return invalid_argument(std::string("'") + key + "'[" + std::to_string(i) + "] = " + j[i].dump() +
                              " is not an integer token id");
    }
    values.push_back(j[i].get<int32_t>());
  }
  return values;
}

Result<double> number(const json& j, const char* key) {
  if (!j.is_number()) return invalid_argument(std::string("'") + key + "' = " + j.dump() + " must be a number");
  return j.get<double>();
}

Result<int64_t> integer(const json& j, const char* key) {
  if (!j.is_number_integer()) return invalid_argument(std::string("'") + key + "' = " + j.dump() + " must be an integer");
  return j.get<int64_t>();
}

}  // namespace

Result<Request> parse_request_line(const std::string& line) {
  Result<json> parsed = parse_strict_json(line, "the request");
  if (!parsed.is_ok()) return parsed.status();
  json j = std::move(parsed).value();
  if (!j.is_object()) return invalid_argument("a request must be a JSON object");
  Request request;
  if (!j.contains("id")) return invalid_argument("missing 'id'");
  // Any JSON value but null identifies the request; it comes back as given (its JSON form).
  if (j["id"].is_null()) return invalid_argument("'id' is null");
  request.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  request.id_json = j["id"].dump();
  if (!j.contains("prompt_token_ids")) return invalid_argument("request '" + request.id + "' lacks 'prompt_token_ids'");
  sampling::SamplingParams& p = request.params;
  for (auto& [key, value] : j.items()) {
    if (key == "id") continue;
    Status status = Status::ok();
    if (key == "prompt_token_ids") {
      Result<std::vector<int32_t>> tokens = int_list(value, "prompt_token_ids");
      if (tokens.is_ok()) request.prompt = std::move(tokens).value(); else status = tokens.status();
    } else if (key == "stop_token_ids") {
      Result<std::vector<int32_t>> tokens = int_list(value, "stop_token_ids");
      if (tokens.is_ok()) p.stop_token_ids = std::move(tokens).value(); else status = tokens.status();
    } else if (key == "temperature" || key == "top_p") {
      Result<double> v = number(value, key.c_str());
      if (v.is_ok()) (key == "temperature" ? p.temperature : p.top_p) = static_cast<float>(*v); else status = v.status();
    } else if (key == "top_k" || key == "n" || key == "max_tokens" || key == "seed") {
      Result<int64_t> v = integer(value, key.c_str());
      if (!v.is_ok()) {
        status = v.status();
      } else if (key == "seed") {
        p.seed = *v;
      } else if (*v < INT32_MIN || *v > INT32_MAX) {
        status = invalid_argument("'" + key + "' = " + std::to_string(*v) + " is out of range");
      } else {
        (key == "top_k" ? p.top_k : key == "n" ? p.n : p.max_tokens) = static_cast<int>(*v);
      }
    } else if (key == "prompt") {
      status = unsupported("'prompt' text needs a tokenizer, which moert does not have yet: give 'prompt_token_ids'");
    } else {
      status = invalid_argument("unknown key '" + key + "'");
    }
    if (!status.is_ok()) return status.with_context("request '" + request.id + "'");
  }
  MOERT_RETURN_IF_ERROR(sampling::validate_sampling_params(p).with_context("request '" + request.id + "'"));
  request.default_seed = fnv1a(request.id);
  return request;
}

std::string format_output_line(const RequestOutput& output) {
  json outputs = json::array();
  for (const SampleOutput& sample : output.outputs) {
    outputs.push_back({{"token_ids", sample.token_ids}, {"finish_reason", sample.finish_reason}});
  }
  json j = {{"id", output.id_json.empty() ? json(output.id) : json::parse(output.id_json)},
            {"outputs", outputs},
            {"prompt_tokens", output.prompt_tokens},
            {"output_tokens", output.output_tokens},
            {"cached_prompt_tokens", output.cached_prompt_tokens},
            {"num_preemptions", output.num_preemptions},
            {"time_s", std::round(output.time_s * 1e6) / 1e6},
            {"queue_s", std::round(output.queue_s * 1e6) / 1e6},
            {"ttft_s", std::round(output.ttft_s * 1e6) / 1e6},
            {"e2e_s", std::round(output.e2e_s * 1e6) / 1e6}};
  if (!output.token_times_s.empty()) {
    json times = json::array();
    for (double t : output.token_times_s) times.push_back(std::round(t * 1e6) / 1e6);
    j["token_times_s"] = times;
  }
  return j.dump();
}

Result<std::unordered_set<std::string>> read_finished_ids(const std::string& path, int* torn_lines) {
  std::unordered_set<std::string> ids;
  *torn_lines = 0;
  std::ifstream in(path);
  if (!in) return ids;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j.contains("outputs")) {
      ++*torn_lines;
      continue;
    }
    ids.insert(j["id"].dump());
  }
  return ids;
}

}  // namespace moert::engine
