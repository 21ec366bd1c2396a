// Chat templates: the Jinja subset Hugging Face checkpoints use to turn a conversation into the
// prompt text (docs/chat_template.md). A template is the `chat_template` of tokenizer_config.json
// (or the checkpoint's chat_template.jinja); rendering it with the messages gives what
// transformers' `apply_chat_template(messages, tokenize=False, ...)` gives. The semantics are those
// of the npm package @huggingface/jinja (the test oracle, tests/text/make_chat_template_oracle.js),
// apart from the few deliberate differences listed in docs/chat_template.md, "Differences".
//
// Usage:
//   const ChatTemplate tmpl = ChatTemplate::parse(source);          // once per checkpoint
//   std::string prompt = tmpl.render(context);                      // context: a JSON object
// or, with a checkpoint folder:
//   const CheckpointChatTemplate chat = CheckpointChatTemplate::load(checkpoint_dir);
//   std::string prompt = chat.apply(messages, {.add_generation_prompt = true});
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moert::text {

namespace jinja {
struct Program;  // the parsed template (jinja_ast.h)
}

// Every error of this module: a syntax error found by ChatTemplate::parse, an error raised by the
// template itself through raise_exception(message), an error while rendering (e.g. a filter
// applied to a value of the wrong type), or a limit of RenderOptions exceeded. what() is one line
// naming the line and column of the template where it happened ("chat template line 3, column
// 17: ...").
class ChatTemplateError : public std::runtime_error {
 public:
  enum class Kind { kSyntax, kRaised, kRuntime, kLimit };

  ChatTemplateError(Kind kind, int line, int column, std::string detail);

  Kind kind() const { return kind_; }
  // 1-based; column counts characters (code points) of the template source. 0 when unknown.
  int line() const { return line_; }
  int column() const { return column_; }
  // The bare message: for kRaised exactly the string given to raise_exception.
  const std::string& detail() const { return detail_; }

 private:
  Kind kind_;
  int line_;
  int column_;
  std::string detail_;
};

// The wall-clock time strftime_now() formats; injected so that rendering is deterministic.
struct CivilTime {
  int year = 1970;
  int month = 1;  // 1..12
  int day = 1;    // 1..31
  int hour = 0;   // 0..23
  int minute = 0;
  int second = 0;
};

// Options of one render. The limits make a hostile or broken template fail with a
// ChatTemplateError of kind kLimit instead of exhausting memory, time or the stack.
struct RenderOptions {
  // The time strftime_now() sees. nullopt: the local time when render() starts.
  std::optional<CivilTime> now;
  // Largest string (the output, or any string made while rendering) in bytes. Default 64 MiB.
  int64_t max_output_bytes = int64_t{64} << 20;
  // Work budget: one step per node evaluated, per array element made and per 256 bytes of
  // string made. Bounds the time and the memory of any render (arrays hold 32 bytes per element).
  // Default 10 million; the test conversations take at most a few thousand.
  int64_t max_steps = 10'000'000;
  // Nesting of evaluation: template nodes inside macro calls inside nodes... Default 1000 (each
  // level costs a few hundred bytes of stack).
  int max_depth = 1000;
};

// A parsed template. Immutable; copies share the parsed program, and render() may be called from
// several threads at once.
class ChatTemplate {
 public:
  // Parses the template text with the whitespace options transformers uses (trim_blocks and
  // lstrip_blocks on; one trailing newline of the source dropped). Throws ChatTemplateError (kind
  // kSyntax) naming the line and column of the first syntax error; templates nested deeper than
  // 256 levels (blocks, brackets, operators) are refused the same way.
  static ChatTemplate parse(std::string_view source);

  // Renders with `context` as the template's variables (a JSON object: messages, tools,
  // add_generation_prompt, bos_token, eos_token, ... any extra kwargs). Objects keep their key
  // order (ordered_json; it matters for `tojson` and `items()`). Throws ChatTemplateError on
  // raise_exception (kRaised), on runtime errors (kRuntime) and on exceeded limits (kLimit); a
  // context that is not an object, or that defines a name the template runtime provides (true,
  // none, namespace, range, raise_exception, strftime_now, ...), is a kRuntime error.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  // The same for a nlohmann::json context, whose objects iterate in sorted key order (so `tojson`
  // of a tool definition prints its keys sorted): prefer the ordered_json overload.
  std::string render(const nlohmann::json& context, const RenderOptions& options = {}) const;

  const std::string& source() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Program> program);
  std::shared_ptr<const jinja::Program> program_;
};

// What apply() adds to the context besides the special tokens.
struct ChatRequest {
  // Appended after the conversation: the header that makes the model answer.
  bool add_generation_prompt = false;
  // The tool definitions (a JSON array, usually {"type": "function", "function": {...}});
  // null: no tools (the template sees `tools` = none, as transformers passes it).
  nlohmann::ordered_json tools = nullptr;
  // Passed as `documents` (null when absent), as transformers does.
  nlohmann::ordered_json documents = nullptr;
  // Extra template variables (enable_thinking, reasoning_effort, date_string, ...): a JSON object
  // or null. They override special tokens of the same name; naming messages, tools, documents or
  // add_generation_prompt is an error.
  nlohmann::ordered_json extra = nullptr;
  RenderOptions options;
};

// A checkpoint's chat template plus the special-token strings transformers passes along with it.
class CheckpointChatTemplate {
 public:
  // Reads dir/tokenizer_config.json (bos/eos/unk/pad/sep/cls/mask tokens, additional_special_tokens
  // and chat_template) and dir/chat_template.jinja, which, when present, takes precedence over the
  // config's chat_template (as in transformers; gpt-oss ships its template only there). Throws
  // std::runtime_error naming the file when neither has a template or a file is malformed.
  // `template_name` picks one of a list of named templates ([{"name", "template"}, ...]); empty:
  // "tool_use" when apply() is given tools and the list has it, else "default".
  static CheckpointChatTemplate load(const std::filesystem::path& dir, std::string template_name = {});
  // The same, or nullopt when the checkpoint has no template at all (no chat_template.jinja
  // and no chat_template in an existing tokenizer_config.json); reads each file once. Throws
  // as load() when a file is missing or malformed.
  static std::optional<CheckpointChatTemplate> load_if_present(const std::filesystem::path& dir,
                                                               std::string template_name = {});
  // The same from a parsed tokenizer_config.json (`subject` names it in errors) and optionally
  // the text of a chat_template.jinja.
  static CheckpointChatTemplate from_config(const nlohmann::json& config, const std::string& subject,
                                            std::optional<std::string> template_file = std::nullopt,
                                            std::string template_name = {});

  // Renders `messages` (a JSON array of {"role", "content", ...}) as
  // tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False,
  // **extra) does. Throws ChatTemplateError as ChatTemplate::render, std::invalid_argument for a
  // bad request (messages not an array, extra not an object or naming a reserved variable).
  std::string apply(const nlohmann::ordered_json& messages, const ChatRequest& request = {}) const;

  // The template apply() uses for a request with (has_tools) or without tools.
  const ChatTemplate& chat_template(bool has_tools) const;
  // The special tokens passed to the template: {"bos_token": "...", "eos_token": "...", ...}.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  CheckpointChatTemplate() = default;
  // load() (only_if_present false: never nullopt) and load_if_present().
  static std::optional<CheckpointChatTemplate> load_config_and_template(const std::filesystem::path& dir,
                                                                        std::string template_name,
                                                                        bool only_if_present);
  std::shared_ptr<const ChatTemplate> default_template_;
  std::shared_ptr<const ChatTemplate> tool_use_template_;  // null: the default serves both
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace moert::text
