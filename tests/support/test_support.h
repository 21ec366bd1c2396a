// Helpers shared by the tests: locating the shared reference data and the moert binary,
// running a command with its output captured, scratch directories, relative errors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/generator.h"

namespace moert::testing {

// True in an AddressSanitizer build (scripts/test.sh --sanitize), whose runtime turns
// mlock/munlock into no-ops: tests of locked memory check less there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// MOERT_SHARED_DIR (set by CTest) or "" when unset or absent.
std::string shared_dir();
// The reference model folders present under shared/reference ("qwen3moe-tiny", ...) whose
// architecture moert implements.
std::vector<std::string> reference_model_names();
// reference_model_names(), or {"missing"} when there are none, so parameterised suites
// always instantiate (their tests skip on "missing").
std::vector<std::string> reference_model_params();
// A GoogleTest-safe parameter name: every non-alphanumeric character becomes '_'.
std::string test_param_name(const std::string& param);

// The moert executable (MOERT_BIN, set by CTest).
std::string moert_binary();

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `command` through /bin/sh, capturing stdout and stderr.
CommandResult run_command(const std::string& command);

// A fresh directory under the test's working directory, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& child) const { return path_ + "/" + child; }

 private:
  std::string path_;
};

// The launcher prefix of a test's real multi-rank run: mpirun of `ranks` ranks that may
// oversubscribe the cores, unbound, killed after `timeout_s` (a hung rank fails the test).
std::string mpirun_prefix(int ranks, int timeout_s = 120);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& contents);

// A results file (JSON lines) as id -> its "outputs", both as JSON text (so 7 and "7" stay
// apart, and timings are left out). A line with "error" or an id written twice is a test
// failure.
std::map<std::string, std::string> outputs_by_id(const std::string& path);

// A random-weight checkpoint of `arch` (the tiny preset with `shape`'s overrides, `seed`)
// written to dir/bf16 and, unless `format` is "bf16", quantized to `format` in dir/<format>;
// returns the directory of the last. Throws std::runtime_error naming the step that failed.
std::string write_generated_model(const std::string& dir, const std::string& arch, const std::string& format,
                                  const ModelShapeOverrides& shape, uint64_t seed);

// ||a - b||_2 / ||b||_2 over `count` values (b is the reference and must not be all zero).
double relative_l2_error(const float* a, const double* b, int64_t count);

}  // namespace moert::testing
