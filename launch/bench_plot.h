// Plots of `moert bench` results (the {"config", "results"} document it writes with --json):
// output throughput against batch size, and median TPOT against output throughput, one PNG
// with both panels, drawn by gnuplot (Debian package gnuplot-nox).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace moert::launch {

// Errors: no results, gnuplot missing or failing (its message), the PNG not written.
Status plot_bench_results(const nlohmann::json& document, const std::string& png_path);

// `moert plot --json FILE --out FILE.png`: the same plot from a saved JSON document.
int run_plot(const std::vector<std::string>& args);

}  // namespace moert::launch
