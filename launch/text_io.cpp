#include "launch/text_io.h"

#include <filesystem>
#include <stdexcept>

#include "launch/commands.h"

#if MOERT_WITH_TEXT
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer.h"
#endif
#if MOERT_WITH_CHAT_TEMPLATE
#include "text/chat_template/chat_template.h"
#endif

namespace moert::launch {
namespace {

#if MOERT_WITH_TEXT
class TokenizerStream final : public engine::TokenTextStream {
 public:
  explicit TokenizerStream(const text::Tokenizer& tokenizer) : decoder_(tokenizer, /*skip_special_tokens=*/true) {}
  std::string push(int32_t id) override { return decoder_.push(id); }
  std::string finish() override { return decoder_.finish(); }

 private:
  text::IncrementalDecoder decoder_;
};

class TokenizerText final : public engine::TokenText {
 public:
  explicit TokenizerText(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::unique_ptr<engine::TokenTextStream> open_stream() const override {
    return std::make_unique<TokenizerStream>(tokenizer_);
  }
  std::string token_piece(int32_t id) const override {
    const int32_t ids[1] = {id};
    return tokenizer_.decode(ids, /*skip_special_tokens=*/false);
  }

 private:
  const text::Tokenizer& tokenizer_;
};
#endif

}  // namespace

struct CheckpointText::Impl {
#if MOERT_WITH_TEXT
  std::optional<text::Tokenizer> tokenizer;
  std::unique_ptr<TokenizerText> token_text;
#endif
#if MOERT_WITH_CHAT_TEMPLATE
  std::optional<text::CheckpointChatTemplate> chat_template;
#endif
};

CheckpointText::CheckpointText(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointText::~CheckpointText() = default;

std::unique_ptr<CheckpointText> CheckpointText::load(const std::string& model_dir) {
  auto impl = std::make_unique<Impl>();
  const std::filesystem::path dir(model_dir);
  std::error_code error;
  try {
#if MOERT_WITH_TEXT
    if (std::filesystem::exists(dir / "tokenizer.json", error)) {
      impl->tokenizer.emplace(text::Tokenizer::load(dir));
      impl->token_text = std::make_unique<TokenizerText>(*impl->tokenizer);
    }
#endif
#if MOERT_WITH_CHAT_TEMPLATE
    impl->chat_template = text::CheckpointChatTemplate::load_if_present(dir);
#endif
  } catch (const std::runtime_error& e) {
    throw CommandError(e.what());
  }
  return std::unique_ptr<CheckpointText>(new CheckpointText(std::move(impl)));
}

bool CheckpointText::has_tokenizer() const {
#if MOERT_WITH_TEXT
  return impl_->tokenizer.has_value();
#else
  return false;
#endif
}

bool CheckpointText::has_chat_template() const {
#if MOERT_WITH_CHAT_TEMPLATE
  return impl_->chat_template.has_value();
#else
  return false;
#endif
}

Result<std::vector<int32_t>> CheckpointText::encode(const std::string& text) const {
#if MOERT_WITH_TEXT
  if (impl_->tokenizer) return impl_->tokenizer->encode(text);
#else
  (void)text;
#endif
  return invalid_argument("text needs the checkpoint's tokenizer (tokenizer.json)");
}

std::string CheckpointText::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
#if MOERT_WITH_TEXT
  if (impl_->tokenizer) return impl_->tokenizer->decode(ids, skip_special_tokens);
#else
  (void)ids;
  (void)skip_special_tokens;
#endif
  return {};
}

Result<std::string> CheckpointText::render_chat(const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& tools,
                                                const nlohmann::ordered_json& kwargs,
                                                bool add_generation_prompt) const {
#if MOERT_WITH_CHAT_TEMPLATE
  if (!impl_->chat_template) {
    return invalid_argument("'messages' need a chat template (chat_template in tokenizer_config.json, or chat_template.jinja)");
  }
  text::ChatRequest request;
  request.add_generation_prompt = add_generation_prompt;
  request.tools = tools;
  request.extra = kwargs;
  try {
    return impl_->chat_template->apply(messages, request);
  } catch (const std::exception& e) {  // ChatTemplateError, std::invalid_argument
    return invalid_argument(std::string("chat template: ") + e.what());
  }
#else
  (void)messages;
  (void)tools;
  (void)kwargs;
  (void)add_generation_prompt;
  return unsupported("this moert was built without chat templates");
#endif
}

const engine::TokenText* CheckpointText::token_text() const {
#if MOERT_WITH_TEXT
  return impl_->token_text.get();
#else
  return nullptr;
#endif
}

Result<std::vector<std::string>> CheckpointText::token_bytes(int32_t vocab_size) const {
#if MOERT_WITH_TEXT
  if (!impl_->tokenizer.has_value()) return invalid_argument("structured output needs the checkpoint's tokenizer (tokenizer.json)");
  const text::Tokenizer& tokenizer = *impl_->tokenizer;
  std::vector<std::string> bytes(static_cast<size_t>(std::max(vocab_size, 0)));
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (tokenizer.is_special(id)) continue;
    const std::optional<std::string> token = tokenizer.id_to_token(id);
    if (!token.has_value()) continue;
    std::string b = text::byte_level_to_bytes(*token);
    // Where the bytes are whole characters, the decode must be exactly them (byte-level BPE).
    const int32_t one[1] = {id};
    const std::string decoded = tokenizer.decode(one, /*skip_special_tokens=*/false);
    if (decoded != b && decoded.find("\xEF\xBF\xBD") == std::string::npos) {
      return unsupported("structured output needs a byte-level BPE tokenizer: token " + std::to_string(id) + " decodes to " +
                         nlohmann::json(decoded).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                         ", not to its bytes");
    }
    bytes[static_cast<size_t>(id)] = std::move(b);
  }
  return bytes;
#else
  (void)vocab_size;
  return unsupported("this moert was built without the tokenizer");
#endif
}

Status resolve_text_keys(const CheckpointText* text, const std::string& model_dir, nlohmann::json& request,
                         const nlohmann::ordered_json& chat_source) {
  const bool has_prompt = request.contains("prompt"), has_messages = request.contains("messages");
  for (const char* key : {"tools", "chat_template_kwargs", "add_generation_prompt"}) {
    if (request.contains(key) && !has_messages) return invalid_argument(std::string("'") + key + "' needs 'messages'");
  }
  if (!has_prompt && !has_messages) return Status::ok();
  if (has_prompt + has_messages + request.contains("prompt_token_ids") > 1) {
    return invalid_argument("give one of 'prompt', 'messages' and 'prompt_token_ids'");
  }
  if (text == nullptr || !text->has_tokenizer()) {
    return invalid_argument(std::string(has_prompt ? "'prompt' text" : "'messages'") +
                            " needs the tokenizer (tokenizer.json in " + model_dir +
                            "); give 'prompt_token_ids' or add the checkpoint's tokenizer files");
  }
  std::string prompt;
  if (has_prompt) {
    if (!request["prompt"].is_string()) return invalid_argument("'prompt' must be a string");
    prompt = request["prompt"].get<std::string>();
    request.erase("prompt");
  } else {
    const nlohmann::json& messages = request["messages"];
    if (!messages.is_array()) return invalid_argument("'messages' must be a list");
    const nlohmann::json generation_prompt = request.value("add_generation_prompt", nlohmann::json(true));
    if (!generation_prompt.is_boolean()) return invalid_argument("'add_generation_prompt' must be true or false");
    const nlohmann::json kwargs = request.value("chat_template_kwargs", nlohmann::json());
    if (!kwargs.is_null() && !kwargs.is_object()) return invalid_argument("'chat_template_kwargs' must be an object");
    // The template sees objects in the order the line wrote them (tojson of tools shows it).
    const auto ordered = [&chat_source](const char* key) {
      return chat_source.is_object() && chat_source.contains(key) ? chat_source[key] : nlohmann::ordered_json();
    };
    MOERT_ASSIGN_OR_RETURN(prompt, text->render_chat(ordered("messages"), ordered("tools"), ordered("chat_template_kwargs"),
                                                     generation_prompt.get<bool>()));
    for (const char* key : {"messages", "tools", "chat_template_kwargs", "add_generation_prompt"}) request.erase(key);
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, text->encode(prompt));
  request["prompt_token_ids"] = std::move(ids);
  return Status::ok();
}

}  // namespace moert::launch
