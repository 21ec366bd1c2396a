#include "runtime/parallel/job_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace moert::parallel {

std::string format_progress(const ProgressSnapshot& p) {
  char text[320];
  const double elapsed = std::max(p.elapsed_s, 1e-9);
  int used = std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(p.finished_requests));
  if (p.total_requests > 0) used += std::snprintf(text + used, sizeof(text) - used, "/%lld", static_cast<long long>(p.total_requests));
  used += std::snprintf(text + used, sizeof(text) - used, " requests, %.1f output tok/s",
                        static_cast<double>(p.output_tokens) / elapsed);
  if (p.total_requests > 0) {
    if (p.finished_requests > 0) {
      const double left = static_cast<double>(std::max<int64_t>(0, p.total_requests - p.finished_requests));
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

std::string format_progress_bar(const ProgressSnapshot& p) {
  constexpr int kCells = 20;
  const int filled = p.total_requests > 0
                         ? static_cast<int>(std::min<int64_t>(kCells, p.finished_requests * kCells / p.total_requests))
                         : 0;
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kCells - filled), '-') +
         "] " + format_progress(p);
}

}  // namespace moert::parallel
