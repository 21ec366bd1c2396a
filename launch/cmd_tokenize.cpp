// moert tokenize: text, and chats through the checkpoint's chat template, to token ids and
// back with the checkpoint's own tokenizer (docs/tokenizer.md, docs/chat_template.md). One
// output line per input line, in input order: {"ids": [...], "decoded": ..., "decoded_skip_special": ...},
// or {"error": "..."} for a line that cannot be tokenized (the others still are; exit code 3).
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/strict_json.h"
#include "launch/commands.h"
#include "launch/job.h"

#include "launch/text_io.h"

namespace po = boost::program_options;

namespace moert::launch {
namespace {

// The ids of one input line: {"text"} encoded as is, or {"messages"} rendered with the chat
// template (add_generation_prompt on) and encoded the same way.
Result<std::vector<int32_t>> tokenize_line(const CheckpointText& text, const std::string& model_dir,
                                           const std::string& line) {
  MOERT_ASSIGN_OR_RETURN(nlohmann::json request, parse_strict_json(line, "the line"));
  if (!request.is_object()) return invalid_argument("a line must be a JSON object");
  for (auto& [key, value] : request.items()) {
    if (key != "text" && key != "messages" && key != "tools" && key != "chat_template_kwargs") {
      return invalid_argument("unknown key '" + key + "' (a line holds 'text' or 'messages')");
    }
  }
  if (request.contains("text") == request.contains("messages")) {
    return invalid_argument("a line must hold either 'text' (a string) or 'messages'");
  }
  if (request.contains("text")) {
    if (!request["text"].is_string()) return invalid_argument("'text' must be a string");
    return text.encode(request["text"].get<std::string>());
  }
  MOERT_RETURN_IF_ERROR(resolve_text_keys(&text, model_dir, request, nlohmann::ordered_json::parse(line)));
  return request["prompt_token_ids"].get<std::vector<int32_t>>();
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args) {
  po::options_description options("moert tokenize options");
  std::string model_dir, input_path, output_path;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(),
       "directory holding tokenizer.json (a checkpoint, or just its tokenizer files; tokenizer_config.json or "
       "chat_template.jinja for chats)")
      ("input", po::value(&input_path)->required(),
       "one JSON object a line: {\"text\": ...} or {\"messages\": [...], \"tools\": ..., \"chat_template_kwargs\": {...}}")
      ("output", po::value(&output_path)->required(), "results, one line per input line (\"-\": stdout)");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  check_input_file(input_path);
  const std::unique_ptr<CheckpointText> text = CheckpointText::load(model_dir);
  if (!text->has_tokenizer()) {
#if MOERT_WITH_TEXT
    throw CommandError("no tokenizer.json in " + model_dir);
#else
    throw CommandError("this moert was built without the tokenizer (PCRE2 / utf8proc were not found)");
#endif
  }
  std::ifstream input(input_path);
  std::ofstream file;
  if (output_path != "-") {
    check_distinct_paths(input_path, output_path, "");
    file.open(output_path, std::ios::trunc);
    if (!file) throw CommandError("cannot write " + output_path);
  }
  std::ostream& out = output_path == "-" ? std::cout : file;
  int failed = 0, line_number = 0;
  for (std::string line; std::getline(input, line);) {
    ++line_number;
    Result<std::vector<int32_t>> ids = tokenize_line(*text, model_dir, line);
    nlohmann::json result;
    if (ids.is_ok()) {
      result = {{"ids", *ids}, {"decoded", text->decode(*ids, false)}, {"decoded_skip_special", text->decode(*ids, true)}};
    } else {
      ++failed;
      std::cerr << "moert tokenize: " << input_path << " line " << line_number << ": " << ids.status().message() << "\n";
      result = {{"error", ids.status().message()}};
    }
    out << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  out.flush();
  if (!out) throw CommandError("write to " + output_path + " failed");
  return failed > 0 ? 3 : 0;
}

}  // namespace moert::launch
