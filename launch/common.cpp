#include "launch/commands.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/regular_file.h"
#include <iostream>

namespace moert::launch {

// Every subcommand also takes --config FILE: the same long options as `key = value` lines
// (Boost.Program_options ini format, `#` comments). Values from the command line are stored
// first, and a stored option is never overwritten, so the command line wins.
bool parse_command_line(const std::vector<std::string>& args, const boost::program_options::options_description& options,
                        boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  po::options_description all;
  all.add(options);
  std::string config_path;
  all.add_options()("config", po::value(&config_path),
                    "read further options from this file: one `long-option = value` a line (the command line wins)");
  po::store(po::command_line_parser(args).options(all).run(), *vm);
  if (vm->count("help")) {
    std::cout << all << "\n";
    return false;
  }
  if (vm->count("config")) {
    const std::string path = (*vm)["config"].as<std::string>();
    const Result<std::string> text = read_regular_file(path, kMaxOptionsFileBytes, "an options file");
    if (!text.is_ok()) throw CommandError("--config: " + text.status().message());
    std::istringstream file(*text);
    try {
      po::store(po::parse_config_file(file, all), *vm);
    } catch (const po::error& e) {
      throw CommandError("--config " + path + ": " + e.what());
    }
  }
  po::notify(*vm);
  return true;
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return io_error("cannot write " + path);
  return Status::ok();
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option_name) {
  std::vector<int> values;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || value < INT32_MIN || value > INT32_MAX) {
      throw CommandError("--" + option_name + ": '" + item + "' (entry " + std::to_string(values.size()) +
                         ") is not an integer");
    }
    values.push_back(static_cast<int>(value));
    start = comma + 1;
  }
  return values;
}

}  // namespace moert::launch
