#include "launch/text_io.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/strict_json.h"
#include "launch/commands.h"

#if MOERT_WITH_TEXT
#include "text/tokenizer/tokenizer.h"
#endif

namespace moert::launch {

#if MOERT_WITH_TEXT
struct TextCodec::Impl {
  text::Tokenizer tokenizer;
};
#else
struct TextCodec::Impl {};
#endif

TextCodec::TextCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextCodec::~TextCodec() = default;

std::unique_ptr<TextCodec> TextCodec::load_if_present(const std::string& model_dir) {
#if MOERT_WITH_TEXT
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) return nullptr;
  try {
    return std::unique_ptr<TextCodec>(new TextCodec(std::make_unique<Impl>(Impl{text::Tokenizer::load(model_dir)})));
  } catch (const std::runtime_error& e) {
    throw CommandError(e.what());
  }
#else
  (void)model_dir;
  return nullptr;
#endif
}

Result<std::string> TextCodec::encode_line(const std::string& line) const {
  MOERT_ASSIGN_OR_RETURN(nlohmann::json j, parse_strict_json(line, "the request"));
  if (!j.is_object() || !j.contains("prompt")) return line;
  if (!j.at("prompt").is_string()) return invalid_argument("'prompt' must be a string");
  if (j.contains("prompt_token_ids")) return invalid_argument("give 'prompt' or 'prompt_token_ids', not both");
#if MOERT_WITH_TEXT
  j["prompt_token_ids"] = impl_->tokenizer.encode(j.at("prompt").get<std::string>());
#endif
  j.erase("prompt");
  return j.dump();
}

std::string TextCodec::decode_line(const std::string& line) const {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("outputs") || !j.at("outputs").is_array()) return line;
#if MOERT_WITH_TEXT
  for (nlohmann::json& sample : j["outputs"]) {
    if (sample.contains("token_ids")) {
      sample["text"] = impl_->tokenizer.decode(sample["token_ids"].get<std::vector<int32_t>>(), /*skip_special_tokens=*/true);
    }
  }
#endif
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status text_prompt_without_tokenizer(const std::string& model_dir) {
  return invalid_argument("'prompt' text needs the tokenizer (tokenizer.json in " + model_dir +
                          "); give 'prompt_token_ids' or add the checkpoint's tokenizer files");
}

}  // namespace moert::launch
