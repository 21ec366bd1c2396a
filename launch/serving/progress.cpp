#include "launch/serving/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <unistd.h>

#include "core/log.h"

namespace moert::serving {

std::string format_progress(const parallel::JobProgress& p, int64_t total_requests) {
  char text[320];
  const double elapsed = std::max(p.elapsed_s, 1e-9);
  int used = std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(p.finished_requests));
  if (total_requests > 0) used += std::snprintf(text + used, sizeof(text) - used, "/%lld", static_cast<long long>(total_requests));
  used += std::snprintf(text + used, sizeof(text) - used, " requests, %.1f output tok/s",
                        static_cast<double>(p.output_tokens) / elapsed);
  if (total_requests > 0) {
    if (p.finished_requests > 0) {
      const double left = static_cast<double>(std::max<int64_t>(0, total_requests - p.finished_requests));
      const auto eta = static_cast<long long>(std::llround(left * elapsed / static_cast<double>(p.finished_requests)));
      used += std::snprintf(text + used, sizeof(text) - used, ", ETA %lld:%02lld:%02lld", eta / 3600, eta / 60 % 60, eta % 60);
    } else {
      used += std::snprintf(text + used, sizeof(text) - used, ", ETA ?");
    }
  }
  if (p.kv_total_blocks > 0) {
    used += std::snprintf(text + used, sizeof(text) - used, ", KV %.1f%% (%lld/%lld blocks)",
                          100.0 * static_cast<double>(p.kv_used_blocks) / static_cast<double>(p.kv_total_blocks),
                          static_cast<long long>(p.kv_used_blocks), static_cast<long long>(p.kv_total_blocks));
  }
  if (p.spec_drafts > 0) {
    std::snprintf(text + used, sizeof(text) - used, ", acceptance %.3f",
                  static_cast<double>(p.spec_accepted) / static_cast<double>(p.spec_drafts));
  }
  return text;
}

std::string format_progress_bar(const parallel::JobProgress& p, int64_t total_requests) {
  constexpr int kCells = 20;
  const int filled = total_requests > 0
                         ? static_cast<int>(std::min<int64_t>(kCells, p.finished_requests * kCells / total_requests))
                         : 0;
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kCells - filled), '-') +
         "] " + format_progress(p, total_requests);
}

ProgressReporter::ProgressReporter(double interval_s, int64_t total_requests, bool bar_on_terminal)
    : interval_s_(interval_s), total_requests_(total_requests), terminal_(bar_on_terminal && isatty(STDERR_FILENO) != 0) {}

void ProgressReporter::operator()(const parallel::JobProgress& progress) {
  if (interval_s_ <= 0) return;
  // A terminal gets the bar redrawn at most 10 times a second; logs get a line per interval.
  const double interval = terminal_ ? 0.1 : interval_s_;
  if (progress.elapsed_s - last_report_s_ < interval && !progress.finished) return;
  if (terminal_) {
    std::fprintf(stderr, "\r%s\033[K%s", format_progress_bar(progress, total_requests_).c_str(),
                 progress.finished ? "\n" : "");
    std::fflush(stderr);
  } else if (!progress.finished) {
    MOERT_INFO("progress: " << format_progress(progress, total_requests_) << ", step " << progress.steps << ", MaxVio "
                            << progress.step_expert_max_violation);
  }
  last_report_s_ = progress.elapsed_s;
}

}  // namespace moert::serving
