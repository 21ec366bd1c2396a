// The public API of chat templates (docs/chat_template.md): parse once, render per request; and
// the checkpoint side: which template and which special tokens transformers would pass.
#include "text/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/regular_file.h"
#include "core/strict_json.h"
#include "text/chat_template/jinja_parser.h"
#include "text/chat_template/jinja_render.h"

namespace moert::text {

namespace {
std::string describe(int line, int column, const std::string& detail) {
  if (line <= 0) return "chat template: " + detail;
  return "chat template line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + detail;
}
}  // namespace

ChatTemplateError::ChatTemplateError(Kind kind, int line, int column, std::string detail)
    : std::runtime_error(describe(line, column, detail)),
      kind_(kind),
      line_(line),
      column_(column),
      detail_(std::move(detail)) {}

// ---- ChatTemplate -------------------------------------------------------------------------------
ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Program> program) : program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) { return ChatTemplate(jinja::parse_program(source)); }

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return jinja::render_program(*program_, context, options);
}

std::string ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  return jinja::render_program(*program_, context, options);
}

const std::string& ChatTemplate::source() const { return program_->source.original; }

// ---- CheckpointChatTemplate ---------------------------------------------------------------------
namespace {

// The special tokens transformers passes to the template (its special_tokens_map): strings, or
// AddedToken objects whose "content" is the string.
nlohmann::ordered_json special_tokens_of(const nlohmann::json& config) {
  const auto token_text = [](const nlohmann::json& v) -> std::optional<std::string> {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
  };
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    if (const auto text = token_text(config[name])) tokens[name] = *text;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const nlohmann::json& v : config["additional_special_tokens"]) {
      if (const auto text = token_text(v)) list.push_back(*text);
    }
    tokens["additional_special_tokens"] = list;
  }
  return tokens;
}

std::shared_ptr<const ChatTemplate> parse_for(const std::string& text, const std::string& subject) {
  try {
    return std::make_shared<const ChatTemplate>(ChatTemplate::parse(text));
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(subject + ": " + e.what());
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  Result<std::string> text = read_regular_file(path.string(), kMaxChatTemplateBytes, "a chat template");
  if (!text.is_ok()) throw std::runtime_error(text.status().message());
  return std::move(text).value();
}

}  // namespace

CheckpointChatTemplate CheckpointChatTemplate::load(const std::filesystem::path& dir, std::string template_name) {
  return load_config_and_template(dir, std::move(template_name), /*only_if_present=*/false).value();
}

std::optional<CheckpointChatTemplate> CheckpointChatTemplate::load_if_present(const std::filesystem::path& dir,
                                                                              std::string template_name) {
  return load_config_and_template(dir, std::move(template_name), /*only_if_present=*/true);
}

std::optional<CheckpointChatTemplate> CheckpointChatTemplate::load_config_and_template(
    const std::filesystem::path& dir, std::string template_name, bool only_if_present) {
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  const bool has_jinja = std::filesystem::exists(jinja_path);
  if (only_if_present && !has_jinja && !std::filesystem::exists(config_path)) return std::nullopt;
  Result<nlohmann::json> config = read_strict_json_file(config_path.string(), kMaxTokenizerFileBytes);
  if (!config.is_ok()) throw std::runtime_error(config.status().to_string());
  if (only_if_present && !has_jinja && !(config->is_object() && config->contains("chat_template"))) {
    return std::nullopt;
  }
  std::optional<std::string> template_file;
  if (has_jinja) template_file = read_text_file(jinja_path);
  try {
    return from_config(*config, config_path.string(), template_file, std::move(template_name));
  } catch (const std::runtime_error& e) {
    // from_config names the file only as "chat_template.jinja"; add the folder.
    const std::string message = e.what();
    if (template_file && message.rfind("chat_template.jinja:", 0) == 0) {
      throw std::runtime_error(jinja_path.string() + message.substr(std::string("chat_template.jinja").size()));
    }
    throw;
  }
}

CheckpointChatTemplate CheckpointChatTemplate::from_config(const nlohmann::json& config, const std::string& subject,
                                                           std::optional<std::string> template_file,
                                                           std::string template_name) {
  if (!config.is_object()) throw std::runtime_error(subject + ": not a JSON object");
  CheckpointChatTemplate out;
  out.special_tokens_ = special_tokens_of(config);
  if (template_file) {
    out.default_template_ = parse_for(*template_file, "chat_template.jinja");
    return out;
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    throw std::runtime_error(subject + ": no chat_template (and no chat_template.jinja next to it)");
  }
  const nlohmann::json& chat_template = config["chat_template"];
  if (chat_template.is_string()) {
    out.default_template_ = parse_for(chat_template.get<std::string>(), subject);
    return out;
  }
  if (!chat_template.is_array()) throw std::runtime_error(subject + ": chat_template is neither a string nor a list");
  // A list of named templates: `template_name`, or "default" plus "tool_use" when present.
  const auto named = [&](const std::string& name) -> const nlohmann::json* {
    for (const nlohmann::json& entry : chat_template) {
      if (entry.is_object() && entry.value("name", nlohmann::json()) == name && entry.contains("template") &&
          entry["template"].is_string()) {
        return &entry["template"];
      }
    }
    return nullptr;
  };
  const std::string wanted = template_name.empty() ? "default" : template_name;
  const nlohmann::json* main = named(wanted);
  if (main == nullptr) throw std::runtime_error(subject + ": no chat template named '" + wanted + "'");
  out.default_template_ = parse_for(main->get<std::string>(), subject + " (template '" + wanted + "')");
  if (template_name.empty()) {
    if (const nlohmann::json* tool_use = named("tool_use")) {
      out.tool_use_template_ = parse_for(tool_use->get<std::string>(), subject + " (template 'tool_use')");
    }
  }
  return out;
}

const ChatTemplate& CheckpointChatTemplate::chat_template(bool has_tools) const {
  return has_tools && tool_use_template_ ? *tool_use_template_ : *default_template_;
}

std::string CheckpointChatTemplate::apply(const nlohmann::ordered_json& messages, const ChatRequest& request) const {
  if (!messages.is_array()) throw std::invalid_argument("chat template: messages must be a JSON array");
  if (!request.extra.is_null() && !request.extra.is_object()) {
    throw std::invalid_argument("chat template: extra variables must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = request.tools;
  context["documents"] = request.documents;
  context["add_generation_prompt"] = request.add_generation_prompt;
  for (const auto& [name, value] : special_tokens_.items()) context[name] = value;
  if (request.extra.is_object()) {
    for (const auto& [name, value] : request.extra.items()) {
      if (name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt") {
        throw std::invalid_argument("chat template: extra variable '" + name + "' is set by the request itself");
      }
      context[name] = value;
    }
  }
  return chat_template(!request.tools.is_null()).render(context, request.options);
}

}  // namespace moert::text
