#include "launch/serving/openai_batch.h"

#include "core/digest.h"

namespace moert::serving {
namespace {

using nlohmann::json;

// Body fields passed through under the same name (request_io.h reads them).
constexpr const char* kSamplingFields[] = {"temperature",        "top_p",      "top_k",      "n",
                                           "seed",               "stop",       "stop_token_ids", "presence_penalty",
                                           "frequency_penalty",  "repetition_penalty", "min_tokens", "ignore_eos",
                                           // structured output (docs/structured-output.md)
                                           "response_format", "guided_json", "guided_regex", "guided_grammar",
                                           "guided_choice"};

bool is_sampling_field(const std::string& key) {
  for (const char* field : kSamplingFields) {
    if (key == field) return true;
  }
  return false;
}

// The 32 hex digits that name a request in ids (stable: from its custom_id).
std::string request_hex(const std::string& custom_id_json) { return digest_of(custom_id_json); }

// The text of one token in log-probabilities (its id in decimal without a tokenizer).
std::string piece_of(const TokenText* text, int32_t id) {
  return text != nullptr ? text->token_piece(id) : std::to_string(id);
}

// Text of one token as OpenAI reports it, and its bytes.
json logprob_entry(const TokenText* text, int32_t id, double logprob) {
  const std::string piece = piece_of(text, id);
  json bytes = json::array();
  for (unsigned char ch : piece) bytes.push_back(static_cast<int>(ch));
  return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

json chat_logprobs(const SampleOutput& sample, const TokenText* text) {
  json content = json::array();
  for (const sampling::TokenLogprob& entry : sample.logprobs) {
    json item = logprob_entry(text, entry.token, entry.logprob);
    json top = json::array();
    for (const auto& [id, logprob] : entry.top) top.push_back(logprob_entry(text, id, logprob));
    item["top_logprobs"] = top;
    content.push_back(std::move(item));
  }
  return {{"content", content}};
}

json completion_logprobs(const SampleOutput& sample, const TokenText* text) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const sampling::TokenLogprob& entry : sample.logprobs) {
    const std::string piece = piece_of(text, entry.token);
    tokens.push_back(piece);
    token_logprobs.push_back(entry.logprob);
    json top = json::object();
    for (const auto& [id, logprob] : entry.top) top[piece_of(text, id)] = logprob;
    top_logprobs.push_back(top);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
}

}  // namespace

bool is_openai_batch_line(const json& line) {
  return line.is_object() && (line.contains("custom_id") || line.contains("body"));
}

std::string openai_custom_id_json(const json& line) {
  return line.is_object() && line.contains("custom_id") ? line["custom_id"].dump() : "null";
}

Result<json> openai_to_request(const json& line, int64_t created) {
  if (!line.is_object()) return invalid_argument("a batch line must be a JSON object");
  for (auto& [key, value] : line.items()) {
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
      return invalid_argument("unknown batch line key '" + key + "'");
    }
  }
  if (!line.contains("custom_id") || !line["custom_id"].is_string()) {
    return invalid_argument("'custom_id' must be a string");
  }
  const json& custom_id = line["custom_id"];
  if (line.value("method", json("POST")) != json("POST")) return invalid_argument("'method' must be \"POST\"");
  const json url = line.value("url", json());
  std::string endpoint;
  if (url == json("/v1/chat/completions")) {
    endpoint = "chat";
  } else if (url == json("/v1/completions")) {
    endpoint = "completions";
  } else {
    return invalid_argument("'url' " + url.dump() + " is not /v1/chat/completions or /v1/completions");
  }
  if (!line.contains("body") || !line["body"].is_object()) return invalid_argument("'body' must be an object");
  const json& body = line["body"];
  json request = {{"id", custom_id}};
  json model = "";
  const bool chat = endpoint == "chat";
  bool want_logprobs = false;
  json top_logprobs = 0;
  for (auto& [key, value] : body.items()) {
    if (is_sampling_field(key)) {
      request[key] = value;
    } else if (key == "model") {
      if (!value.is_string()) return invalid_argument("'body.model' must be a string");
      model = value;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (!value.is_null()) request["max_tokens"] = value;
    } else if (key == "stream") {
      if (value != json(false)) return invalid_argument("'body.stream' must be false in a batch");
    } else if (key == "user") {
      // Accepted and ignored, as the OpenAI API does for serving.
    } else if (chat && key == "messages") {
      request["messages"] = value;
    } else if (chat && (key == "tools" || key == "chat_template_kwargs" || key == "add_generation_prompt")) {
      request[key] = value;
    } else if (chat && key == "logprobs") {
      if (!value.is_boolean() && !value.is_null()) return invalid_argument("'body.logprobs' must be true or false");
      want_logprobs = value == json(true);
    } else if (chat && key == "top_logprobs") {
      top_logprobs = value;
    } else if (!chat && key == "prompt") {
      if (value.is_string()) {
        request["prompt"] = value;
      } else if (value.is_array() && !value.empty() && value[0].is_number_integer()) {
        request["prompt_token_ids"] = value;
      } else if (value.is_array() && value.size() == 1 && value[0].is_string()) {
        request["prompt"] = value[0];
      } else {
        return invalid_argument("'body.prompt' must be a string or a list of token ids (one prompt per batch line)");
      }
    } else if (!chat && key == "logprobs") {
      if (!value.is_null()) request["logprobs"] = value;
    } else {
      return invalid_argument("'body." + key + "' is not supported by moert" +
                              (key == "messages" || key == "prompt"
                                   ? std::string(" on ") + (chat ? "/v1/chat/completions" : "/v1/completions")
                                   : std::string()));
    }
  }
  if (chat && !request.contains("messages")) return invalid_argument("'body.messages' is missing");
  if (!chat && !request.contains("prompt") && !request.contains("prompt_token_ids")) {
    return invalid_argument("'body.prompt' is missing");
  }
  if (want_logprobs) request["logprobs"] = top_logprobs;
  if (!want_logprobs && !top_logprobs.is_null() && top_logprobs != json(0)) {
    return invalid_argument("'body.top_logprobs' needs 'logprobs': true");
  }
  request["openai"] = {{"custom_id", custom_id}, {"endpoint", endpoint}, {"model", model}, {"created", created}};
  return request;
}

std::string format_openai_output(const RequestOutput& output, const std::string& openai_json, const TokenText* text) {
  const json meta = json::parse(openai_json);
  const bool chat = meta.value("endpoint", "") == "chat";
  const std::string custom_id_json = meta.at("custom_id").dump();
  const std::string hex = request_hex(custom_id_json);
  json choices = json::array();
  int64_t index = 0;
  for (const SampleOutput& sample : output.outputs) {
    json choice = {{"index", index++}};
    const std::string content = sample.text.value_or("");
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", content}};
    } else {
      choice["text"] = content;
    }
    choice["logprobs"] = sample.logprobs.empty() ? json()
                         : chat                   ? chat_logprobs(sample, text)
                                                  : completion_logprobs(sample, text);
    choice["finish_reason"] = sample.finish_reason;
    choice["stop_reason"] = sample.stop_string.has_value() ? json(*sample.stop_string)
                            : sample.stop_token.has_value() ? json(*sample.stop_token)
                                                            : json();
    choice["token_ids"] = sample.token_ids;
    choices.push_back(std::move(choice));
  }
  const json body = {{"id", (chat ? "chatcmpl-" : "cmpl-") + hex},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", meta.value("created", int64_t{0})},
                     {"model", meta.value("model", "")},
                     {"choices", choices},
                     {"usage",
                      {{"prompt_tokens", output.prompt_tokens},
                       {"completion_tokens", output.output_tokens},
                       {"total_tokens", output.prompt_tokens + output.output_tokens}}}};
  const json line = {{"id", "batch_req_" + hex},
                     {"custom_id", meta.at("custom_id")},
                     {"response", {{"status_code", 200}, {"request_id", hex}, {"body", body}}},
                     {"error", nullptr}};
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string format_openai_error(const std::string& custom_id_json, const std::string& message, int line_number) {
  const json line = {{"id", "batch_req_" + request_hex(custom_id_json + ":" + std::to_string(line_number))},
                     {"custom_id", json::parse(custom_id_json)},
                     {"response", nullptr},
                     {"error", {{"code", "invalid_request"}, {"message", message}, {"line", line_number}}}};
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace moert::serving
