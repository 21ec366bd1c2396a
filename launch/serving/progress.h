// The progress display of a batch job at rank 0 (pure formatting): requests done of the
// total, output tokens per second, ETA, KV cache use over all ranks and, when speculating,
// the acceptance rate. On a terminal one line is redrawn in place with a bar; otherwise the
// same figures go out as periodic log lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/parallel/batch_job.h"

namespace moert::serving {

// "12/64 requests, 345.2 output tok/s, ETA 0:01:23, KV 12.5% (40/320 blocks), acceptance 0.731".
// The ETA extrapolates the request completion rate; it is "?" before the first finish.
// `total_requests`: the job's requests, 0 when unknown (no ETA, no bar).
std::string format_progress(const parallel::JobProgress& p, int64_t total_requests);
// The terminal form: "[#####---------------] " (20 cells, by finished / total) + format_progress.
std::string format_progress_bar(const parallel::JobProgress& p, int64_t total_requests);

// Draws the coordinator's progress (parallel::CoordinatorEvents::on_progress) on stderr:
// on a terminal (and when `bar_on_terminal`) the bar redrawn in place at most 10 times a
// second and once when the job finishes; otherwise a log line every `interval_s` while work
// is left. interval_s <= 0: nothing.
class ProgressReporter {
 public:
  ProgressReporter(double interval_s, int64_t total_requests, bool bar_on_terminal);
  void operator()(const parallel::JobProgress& progress);

 private:
  double interval_s_;
  int64_t total_requests_;
  bool terminal_;
  double last_report_s_ = 0.0;  // JobProgress::elapsed_s of the last report
};

}  // namespace moert::serving
