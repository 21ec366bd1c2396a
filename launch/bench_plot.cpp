#include "launch/bench_plot.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"
#include "launch/commands.h"

namespace moert::launch {
namespace {

// gnuplot reads the data inline ($data heredoc): batch size, output tok/s, TPOT p50 ms.
std::string gnuplot_script(const nlohmann::json& document, const std::string& png_path) {
  const nlohmann::json& config = document.at("config");
  std::string title = config.value("architecture", std::string("model")) + ", " +
                      std::to_string(config.value("ranks", 1)) + " rank(s), " + config.value("device", std::string(""));
  for (char& ch : title) ch = ch == '"' ? '\'' : ch;
  std::string script = "$data << EOD\n";
  for (const nlohmann::json& r : document.at("results")) {
    char row[160];
    std::snprintf(row, sizeof(row), "%d %.6f %.6f\n", r.at("batch_size").get<int>(),
                  r.at("output_throughput_tok_s").get<double>(), r.at("tpot_ms").at("p50").get<double>());
    script += row;
  }
  script += "EOD\n";
  script += "set terminal png size 1200,480\n";
  script += "set output '" + png_path + "'\n";
  script += "set multiplot layout 1,2 title \"moert bench: " + title + "\"\n";
  script += "set grid\nset key off\n";
  script += "set logscale x 2\nset xlabel 'batch size (concurrent sequences)'\nset ylabel 'output tokens/s'\n";
  script += "plot $data using 1:2 with linespoints pt 7\n";
  script += "unset logscale x\nset xlabel 'output tokens/s'\nset ylabel 'TPOT p50 (ms)'\n";
  script += "plot $data using 2:3:(sprintf('%d', $1)) with linespoints pt 7, '' using 2:3:(sprintf('%d', $1)) "
            "with labels offset 0,1\n";
  script += "unset multiplot\n";
  return script;
}

}  // namespace

Status plot_bench_results(const nlohmann::json& document, const std::string& png_path) {
  if (!document.is_object() || !document.contains("config") || !document.contains("results") ||
      !document.at("results").is_array() || document.at("results").empty()) {
    return invalid_argument("no benchmark results to plot");
  }
  if (png_path.find('\'') != std::string::npos) return invalid_argument("plot path " + png_path + " holds a quote");
  std::string script;
  try {
    script = gnuplot_script(document, png_path);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("benchmark results lack a field: ") + e.what());
  }
  FILE* gnuplot = popen("gnuplot 2>&1", "w");
  if (gnuplot == nullptr) return unsupported("cannot start gnuplot (install gnuplot-nox)");
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = pclose(gnuplot);
  if (status != 0) {
    return unsupported("gnuplot failed (exit status " + std::to_string(status) +
                       "; is gnuplot-nox installed?) writing " + png_path);
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(png_path, ec) || std::filesystem::file_size(png_path, ec) == 0) {
    return io_error("gnuplot wrote no image to " + png_path);
  }
  return Status::ok();
}

int run_plot(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description options("moert plot options");
  std::string json_path, png_path;
  options.add_options()
      ("help,h", "show this help")
      ("json", po::value(&json_path)->required(), "a `moert bench --json` document")
      ("out", po::value(&png_path)->required(), "the PNG to write");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  const nlohmann::json document = value_or_throw(read_strict_json_file(json_path, kMaxOptionsFileBytes));
  throw_if_error(plot_bench_results(document, png_path));
  return 0;
}

}  // namespace moert::launch
