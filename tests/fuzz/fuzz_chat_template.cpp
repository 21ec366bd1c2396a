// libFuzzer target: chat templates on hostile input (docs/chat_template.md). The input is a
// template; when it parses, it is rendered with a small fixed conversation (messages with tool
// calls, tools, special tokens, add_generation_prompt) under tight RenderOptions limits. A
// ChatTemplateError (syntax, raised, runtime or limit) is an expected outcome; anything else
// escaping, a sanitizer report, a hang or a stack overflow is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/chat_template/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is the weather in Paris? \u00e9\u4f60\ud83d\ude42"},
      {"role": "assistant", "content": "<think>\nchecking\n</think>\n\nLet me look.",
       "tool_calls": [{"id": "call12345", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "call12345"},
      {"role": "assistant", "content": "It is 21.5 degrees.", "thinking": "easy", "reasoning_content": null}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                              "days": {"type": "integer", "default": 1}}, "required": ["city"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": false,
    "numbers": [0, -1, 2.5, 3.0, 9223372036854775807]
  })");
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  moert::text::RenderOptions options;
  options.now = moert::text::CivilTime{2025, 3, 7, 14, 5, 9};
  options.max_steps = 20000;
  options.max_output_bytes = int64_t{1} << 20;
  options.max_depth = 300;
  try {
    const moert::text::ChatTemplate chat_template = moert::text::ChatTemplate::parse(source);
    (void)chat_template.render(context(), options);
  } catch (const moert::text::ChatTemplateError&) {
  }
  return 0;
}
