#include "launch/bench_options.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "runtime/model/config.h"

namespace moert::launch {
namespace {

constexpr int kMaxNumRequests = 1000000;
constexpr int kMaxRuns = 1000;
constexpr int kMaxBatchSize = 1 << 20;

template <typename T>
T option_or(const boost::program_options::variables_map& vm, const char* name, T fallback) {
  return vm.count(name) ? vm[name].as<T>() : fallback;
}

void check_range(const char* option, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high) {
    throw CommandError(std::string("--") + option + " " + std::to_string(value) + " is outside [" +
                       std::to_string(low) + ", " + std::to_string(high) + "]");
  }
}

// The longest length request_length (cmd_bench.cpp) draws around `mean`.
int64_t longest_length(int mean, const std::string& dist, double range) {
  if (dist != "uniform") return mean;
  const double low = mean * (1.0 - range), high = mean * (1.0 + range);
  return static_cast<int64_t>(std::floor(low + (high - low + 1.0)));  // u < 1: at most this
}

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code error;
  return std::filesystem::weakly_canonical(a, error) == std::filesystem::weakly_canonical(b, error);
}

}  // namespace

void validate_bench_options(const boost::program_options::variables_map& vm) {
  if (vm.count("num-requests") && !vm["num-requests"].defaulted()) {
    const int num_requests = vm["num-requests"].as<int>();
    if (num_requests < 1) {
      throw CommandError("--num-requests " + std::to_string(num_requests) +
                         " must be >= 1 (leave it out for 4 x the batch size, at least 8)");
    }
    check_range("num-requests", num_requests, 1, kMaxNumRequests);
  }
  const int input_len = option_or(vm, "input-len", 128), output_len = option_or(vm, "output-len", 64);
  check_range("input-len", input_len, 1, INT32_MAX);
  check_range("output-len", output_len, 1, INT32_MAX);
  check_range("warmup", option_or(vm, "warmup", 1), 0, kMaxRuns);
  const int64_t seed = option_or<int64_t>(vm, "seed", 0);
  if (seed < 0) throw CommandError("--seed " + std::to_string(seed) + " must be >= 0");
  check_range("repeats", option_or(vm, "repeats", 3), 1, kMaxRuns);
  const std::string dist = option_or<std::string>(vm, "len-dist", "fixed");
  if (dist != "fixed" && dist != "uniform") throw CommandError("--len-dist '" + dist + "' is not fixed or uniform");
  const double range = option_or(vm, "len-range", 0.5);
  if (!(range >= 0.0 && range < 1.0)) throw CommandError("--len-range " + std::to_string(range) + " is outside [0, 1)");
  const std::string batch_sizes = option_or<std::string>(vm, "batch-sizes", "");
  if (!batch_sizes.empty()) {
    for (int b : parse_int_list(batch_sizes, "batch-sizes")) check_range("batch-sizes entry", b, 1, kMaxBatchSize);
  }
  const std::string json = option_or<std::string>(vm, "json", ""), csv = option_or<std::string>(vm, "csv", ""),
                    plot = option_or<std::string>(vm, "plot", "");
  if (same_file(json, csv) || same_file(json, plot) || same_file(csv, plot)) {
    throw CommandError("--json, --csv and --plot must name different files (" + json + ", " + csv + ", " + plot + ")");
  }
  // Synthetic requests must fit the model's context; --input lines are checked as `moert run` does.
  if (option_or<std::string>(vm, "input", "").empty() && vm.count("model")) {
    const Result<ModelConfig> config = load_model_config(vm["model"].as<std::string>());
    if (!config.is_ok()) return;
    const int64_t longest = longest_length(input_len, dist, range) + longest_length(output_len, dist, range);
    if (longest > config->max_position_embeddings) {
      throw CommandError("--input-len " + std::to_string(input_len) + " and --output-len " + std::to_string(output_len) +
                         " make requests of up to " + std::to_string(longest) +
                         " tokens, past the model's context of " + std::to_string(config->max_position_embeddings) +
                         " (max_position_embeddings)");
    }
  }
}

}  // namespace moert::launch
