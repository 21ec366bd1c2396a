// The `moert` subcommands. Each takes the arguments after its name and returns the
// process exit code; errors are reported as one line on stderr by the caller.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace moert::launch {

// Thrown for bad command lines and failed operations; main() prints "moert: error: <what>".
struct CommandError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int run_make_model(const std::vector<std::string>& args);
int run_score(const std::vector<std::string>& args);
int run_serve_batch(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);

// "1,2,3" -> {1, 2, 3}; names the bad entry on error.
std::vector<int> parse_int_list(const std::string& text, const std::string& option_name);

}  // namespace moert::launch
