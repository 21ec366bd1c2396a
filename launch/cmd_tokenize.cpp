// moert tokenize: text (and, with a chat template, chats) to token ids and back with the
// checkpoint's own tokenizer (text/tokenizer, docs/tokenizer.md). One output line per input
// line, in input order: {"ids": [...], "decoded": ..., "decoded_skip_special": ...}, or
// {"error": "..."} for a line that cannot be tokenized (the others still are; exit code 3).
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/strict_json.h"
#include "launch/commands.h"
#include "launch/job.h"

#if MOERT_WITH_TEXT
#include "text/tokenizer/tokenizer.h"
#endif

namespace po = boost::program_options;

namespace moert::launch {

int run_tokenize(const std::vector<std::string>& args) {
  po::options_description options("moert tokenize options");
  std::string model_dir, input_path, output_path;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "directory holding tokenizer.json (a checkpoint, or just its tokenizer files)")
      ("input", po::value(&input_path)->required(), "one JSON object a line: {\"text\": ...}")
      ("output", po::value(&output_path)->required(), "results, one line per input line (\"-\": stdout)");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
#if MOERT_WITH_TEXT
  check_input_file(input_path);
  std::unique_ptr<text::Tokenizer> tokenizer;
  try {
    tokenizer = std::make_unique<text::Tokenizer>(text::Tokenizer::load(model_dir));
  } catch (const std::runtime_error& e) {
    throw CommandError(e.what());
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
    nlohmann::json result;
    Result<nlohmann::json> request = parse_strict_json(line, "the line");
    std::string error = request.is_ok() ? "" : request.status().message();
    if (error.empty() && (!request->is_object() || !request->contains("text") || !request->at("text").is_string())) {
      error = request->is_object() && request->contains("messages")
                  ? "'messages' need a chat template, which moert tokenize does not render yet: give 'text'"
                  : "a line must be an object with a string 'text'";
    }
    if (error.empty()) {
      const std::vector<int32_t> ids = tokenizer->encode(request->at("text").get<std::string>());
      result = {{"ids", ids}, {"decoded", tokenizer->decode(ids, false)}, {"decoded_skip_special", tokenizer->decode(ids, true)}};
    } else {
      ++failed;
      std::cerr << "moert tokenize: " << input_path << " line " << line_number << ": " << error << "\n";
      result = {{"error", error}};
    }
    out << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  out.flush();
  if (!out) throw CommandError("write to " + output_path + " failed");
  return failed > 0 ? 3 : 0;
#else
  (void)model_dir;
  throw CommandError("this moert was built without the tokenizer (PCRE2 / utf8proc were not found)");
#endif
}

}  // namespace moert::launch
