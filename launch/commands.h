// The `moert` subcommands. Each takes the arguments after its name and returns the
// process exit code; errors are reported as one line on stderr by the caller.
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/status.h"

namespace moert::launch {

// Thrown for bad command lines and failed operations; main() prints "moert: error: <what>".
struct CommandError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int run_make_model(const std::vector<std::string>& args);
int run_score(const std::vector<std::string>& args);
int run_serve_batch(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_quantize(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args);

// Parses a subcommand's options. Returns false after printing the help when --help was
// given; throws boost::program_options errors for bad or missing options.
bool parse_command_line(const std::vector<std::string>& args, const boost::program_options::options_description& options,
                        boost::program_options::variables_map* vm);

// Unwrap a Result / check a Status, or throw CommandError with its message.
template <typename T>
T value_or_throw(Result<T> result) {
  if (!result.is_ok()) throw CommandError(result.status().message());
  return std::move(result).value();
}
inline void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw CommandError(status.message());
}

// Writes `text` to `path` (replacing it); io_error naming the path on failure.
Status write_text_file(const std::string& path, const std::string& text);

// "1,2,3" -> {1, 2, 3}; names the bad entry on error.
std::vector<int> parse_int_list(const std::string& text, const std::string& option_name);

}  // namespace moert::launch
