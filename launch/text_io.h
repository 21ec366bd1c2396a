// A checkpoint's text side for the commands (docs/generation.md, docs/chat_template.md): its
// tokenizer (tokenizer.json) and chat template (tokenizer_config.json or chat_template.jinja),
// when the checkpoint has them and moert was built with them. Every rank of `moert run` loads
// it: the coordinator turns "prompt" text and "messages" into ids, every rank decodes its
// outputs and watches for stop strings (engine::TokenText).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/engine/token_text.h"

namespace moert::launch {

class CheckpointText {
 public:
  // The tokenizer and chat template of model_dir, whichever are present. Throws CommandError
  // for files moert cannot load (naming the file and the problem).
  static std::unique_ptr<CheckpointText> load(const std::string& model_dir);
  ~CheckpointText();

  bool has_tokenizer() const;
  bool has_chat_template() const;
  // Ids of `text` (added tokens recognised, no BOS/EOS added); an error without a tokenizer.
  Result<std::vector<int32_t>> encode(const std::string& text) const;
  // decode(ids) with or without special tokens; needs the tokenizer.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  // The prompt text of a chat: the template rendered with the messages, tools (null: none),
  // extra template variables (chat_template_kwargs, an object or null) and the generation
  // prompt. Errors name the problem (no template, a template error, bad messages).
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  const nlohmann::ordered_json& kwargs, bool add_generation_prompt) const;
  // The engine's view of the tokenizer; null without one. Lives as long as this object.
  const engine::TokenText* token_text() const;
  // The bytes each id in [0, vocab_size) adds to the decoded text, for structured output's token
  // masks: empty for special tokens and ids the tokenizer lacks. An error without a tokenizer, or
  // for a tokenizer that is not byte-level BPE (a token whose decode differs from its bytes).
  Result<std::vector<std::string>> token_bytes(int32_t vocab_size) const;

 private:
  struct Impl;
  explicit CheckpointText(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The request keys (docs/requests.md) that the coordinator resolves into prompt_token_ids:
// "prompt" -> encode; "messages" (+ "tools", "chat_template_kwargs", "add_generation_prompt",
// default true) -> render_chat -> encode. `text` may be null (then such keys are an error
// naming what is missing). Other keys are left alone. `chat_source` is the object that holds
// the messages, tools and chat_template_kwargs with their keys in the order the input wrote
// them (request is a nlohmann::json, whose objects are sorted).
Status resolve_text_keys(const CheckpointText* text, const std::string& model_dir, nlohmann::json& request,
                         const nlohmann::ordered_json& chat_source);

}  // namespace moert::launch
