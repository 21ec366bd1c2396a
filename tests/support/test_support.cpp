#include "tests/support/test_support.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "runtime/model/config.h"
#include "runtime/model/quantizer.h"

namespace moert::testing {

namespace fs = std::filesystem;

std::string shared_dir() {
  const char* dir = std::getenv("MOERT_SHARED_DIR");
  if (dir == nullptr || !fs::is_directory(fs::path(dir) / "reference")) return "";
  return dir;
}

std::vector<std::string> reference_model_names() {
  std::vector<std::string> names;
  const std::string dir = shared_dir();
  if (dir.empty()) return names;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "reference")) {
    if (!fs::is_regular_file(entry.path() / "hf" / "config.json")) continue;
    // Reference models of architectures moert does not implement yet are left out here
    // (and refused by `moert` with "unknown architecture"); any other config error keeps
    // the model in the list so that the tests using it fail loudly.
    const Result<ModelConfig> config = load_model_config((entry.path() / "hf").string());
    if (!config.is_ok() && config.status().code() == StatusCode::kUnsupported &&
        config.status().message().find("unknown architecture") != std::string::npos) {
      continue;
    }
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> reference_model_params() {
  std::vector<std::string> names = reference_model_names();
  if (names.empty()) names.push_back("missing");
  return names;
}

std::string test_param_name(const std::string& param) {
  std::string name = param;
  for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

std::string moert_binary() {
  const char* bin = std::getenv("MOERT_BIN");
  if (bin == nullptr) throw std::runtime_error("MOERT_BIN is not set (run the tests through ctest)");
  return bin;
}

CommandResult run_command(const std::string& command) {
  static int counter = 0;
  const std::string base = fs::temp_directory_path().string() + "/moert-cmd-" + std::to_string(getpid()) + "-" +
                           std::to_string(counter++);
  const std::string full = command + " >" + base + ".out 2>" + base + ".err";
  CommandResult result;
  const int status = std::system(full.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(base + ".out");
  result.err = read_file(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return result;
}

ScratchDir::ScratchDir(const std::string& name) {
  path_ = (fs::current_path() / ("scratch-" + name + "-" + std::to_string(getpid()))).string();
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

std::string mpirun_prefix(int ranks, int timeout_s) {
  return "timeout -k 5 " + std::to_string(timeout_s) + " mpirun -np " + std::to_string(ranks) +
         " --oversubscribe --bind-to none ";
}

std::map<std::string, std::string> outputs_by_id(const std::string& path) {
  std::map<std::string, std::string> by_id;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json parsed = nlohmann::json::parse(line);
    EXPECT_FALSE(parsed.contains("error")) << line;
    EXPECT_EQ(by_id.count(parsed["id"].dump()), 0u) << "written twice in " << path << ": " << line;
    by_id[parsed["id"].dump()] = parsed["outputs"].dump();
  }
  return by_id;
}

double relative_l2_error(const float* a, const double* b, int64_t count) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  if (norm == 0.0) throw std::runtime_error("relative_l2_error: the reference is all zeros");
  return std::sqrt(diff / norm);
}

std::string write_generated_model(const std::string& dir, const std::string& arch, const std::string& format,
                                  const ModelShapeOverrides& shape, uint64_t seed) {
  ThreadPool pool(2);
  const Result<ModelConfig> config = preset_model_config(find_architecture(arch), "tiny", shape);
  if (!config.is_ok()) throw std::runtime_error("preset_model_config: " + config.status().to_string());
  const std::string bf16 = dir + "/bf16";
  if (const Status written = write_random_checkpoint(*config, seed, bf16, 1 << 30, pool); !written.is_ok()) {
    throw std::runtime_error("write_random_checkpoint: " + written.to_string());
  }
  if (format == "bf16") return bf16;
  QuantizeOptions options;
  const Result<quant::WeightFormat> parsed = parse_weight_format(format);
  if (!parsed.is_ok()) throw std::runtime_error(parsed.status().to_string());
  options.format = *parsed;
  const std::string quantized = dir + "/" + format;
  const Result<QuantizeReport> report = quantize_checkpoint(bf16, quantized, options);
  if (!report.is_ok()) throw std::runtime_error("quantize_checkpoint: " + report.status().to_string());
  if (report->quantized_tensors == 0) throw std::runtime_error("quantize_checkpoint quantized no tensor");
  return quantized;
}

}  // namespace moert::testing
