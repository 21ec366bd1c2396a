#include "launch/request_reader.h"

#include <fstream>
#include <optional>

#include "core/log.h"
#include "core/strict_json.h"
#include "launch/commands.h"
#include "launch/serving/openai_batch.h"
#include "launch/serving/request_io.h"

namespace moert::launch {
namespace {

// The request line, the request, and the "openai" object of an OpenAI batch line (else empty).
struct ResolvedRequest {
  std::string line;
  engine::Request request;
  std::string openai_json;
};

// The JSON schema of a json_schema constraint with its keys in the order the line wrote them
// (properties are generated in that order; nlohmann::json sorts keys), or null. `source` is the
// line, or the body of an OpenAI batch line.
const nlohmann::ordered_json* written_schema(const nlohmann::ordered_json& source) {
  if (!source.is_object()) return nullptr;
  if (source.contains("guided_json") && source["guided_json"].is_object()) return &source["guided_json"];
  if (!source.contains("response_format") || !source["response_format"].is_object()) return nullptr;
  const nlohmann::ordered_json& format = source["response_format"];
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) return nullptr;
  const nlohmann::ordered_json& spec = format["json_schema"];
  return spec.contains("schema") && spec["schema"].is_object() ? &spec["schema"] : nullptr;
}

// One input line -> a request line the ranks parse, or an error. `openai` tells whether the
// line is (or, for unparseable text, whether the file is) in the OpenAI batch shape;
// *id_json receives the request's id as JSON when known.

Result<ResolvedRequest> resolve_request(const std::string& line, const RequestContext& context, bool* openai,
                                        std::string* id_json) {
  MOERT_ASSIGN_OR_RETURN(nlohmann::json j, parse_strict_json(line, "the line"));
  *openai = serving::is_openai_batch_line(j);
  std::string openai_json;
  nlohmann::ordered_json chat_source;
  bool chat_endpoint = false;
  if (*openai) {
    *id_json = serving::openai_custom_id_json(j);
    MOERT_ASSIGN_OR_RETURN(nlohmann::json request, serving::openai_to_request(j, context.created));
    chat_endpoint = request.contains("messages");
    if (chat_endpoint) chat_source = nlohmann::ordered_json::parse(line).at("body");
    openai_json = request.at("openai").dump();
    request.erase("openai");
    j = std::move(request);
  } else {
    if (j.is_object() && j.contains("id")) *id_json = j["id"].dump();
    if (j.is_object() && j.contains("messages")) chat_source = nlohmann::ordered_json::parse(line);
  }
  if (!j.is_object()) return invalid_argument("a request must be a JSON object");
  MOERT_RETURN_IF_ERROR(resolve_text_keys(context.text, context.model_dir, j, chat_source));
  if (context.defaults != nullptr) apply_generation_defaults(*context.defaults, j);
  // A chat without max_tokens may use the rest of the context (as the OpenAI API does), as far
  // as the KV pool can hold it.
  if (chat_endpoint && !j.contains("max_tokens") && j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
    j["max_tokens"] = std::max<int64_t>(1, context.max_sequence_length - static_cast<int64_t>(j["prompt_token_ids"].size()));
  }
  MOERT_ASSIGN_OR_RETURN(engine::Request request, serving::parse_request(j));
  if (request.params.guided_kind == "json_schema") {
    // The ranks get the schema as written (guided_json text), after parse_request checked the line.
    const nlohmann::ordered_json source = nlohmann::ordered_json::parse(line);
    if (const nlohmann::ordered_json* schema = written_schema(*openai ? source.at("body") : source)) {
      request.params.guided_spec = schema->dump();
      j.erase("response_format");
      j["guided_json"] = request.params.guided_spec;
    }
  }
  if (*openai && (context.text == nullptr || context.text->token_text() == nullptr)) {
    return invalid_argument("OpenAI batch results hold text, which needs the checkpoint's tokenizer (tokenizer.json in " +
                            context.model_dir + ")");
  }
  return ResolvedRequest{j.dump(), std::move(request), std::move(openai_json)};
}

}  // namespace

ParsedInput read_requests(const std::string& input_path, const std::unordered_set<std::string>& done,
                          const RequestContext& context, serving::OutputFile& writer) {
  std::ifstream input(input_path);
  if (!input) throw CommandError("cannot open input " + input_path);
  ParsedInput parsed;
  std::unordered_set<std::string> seen;
  std::optional<bool> openai_file;  // the shape of the first line that parsed, for lines that do not
  std::string line;
  for (int line_number = 1; std::getline(input, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    bool openai = false;
    std::string id_json = "null";
    Result<ResolvedRequest> resolved = resolve_request(line, context, &openai, &id_json);
    if (resolved.is_ok() || id_json != "null") openai_file = openai_file.value_or(openai);
    if (!resolved.is_ok() && id_json == "null") openai = openai_file.value_or(openai);
    Status status = resolved.is_ok() ? Status::ok() : resolved.status();
    if (status.is_ok() && !seen.insert(resolved->request.id_json).second) {
      status = invalid_argument(std::string(openai ? "custom_id" : "request id") + " " + id_json + " appears twice");
      id_json = "null";  // the error line must not mark the first one as done
    }
    if (status.is_ok() && done.count(resolved->request.id_json)) {
      ++parsed.skipped;
      continue;
    }
    if (status.is_ok()) status = context.engine.check_request(resolved->request);
    if (!status.is_ok()) {
      ++parsed.failed_lines;
      // Its error line is in the output already (an earlier run of this job).
      if (done.count(id_json) || (id_json == "null" && done.count(serving::error_line_key(std::to_string(line_number))))) {
        continue;
      }
      MOERT_ERROR(input_path << " line " << line_number << ": " << status.message());
      const Status written = writer.write_line(serving::format_error_line(id_json, status.message(), line_number, openai));
      if (!written.is_ok()) throw CommandError(written.message());
      continue;
    }
    if (!resolved->openai_json.empty()) parsed.openai_by_id[resolved->request.id_json] = std::move(resolved->openai_json);
    parsed.requests.add(std::move(resolved->line), resolved->request, context.engine.config().block_size);
  }
  return parsed;
}

}  // namespace moert::launch
