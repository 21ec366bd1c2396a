// The progress display of a batch job at rank 0 (pure formatting): requests done of the
// total, output tokens per second, ETA, KV cache use over all ranks and, when speculating,
// the acceptance rate. On a terminal one line is redrawn in place with a bar; otherwise the
// same figures go out as periodic log lines.
#pragma once

#include <cstdint>
#include <string>

namespace moert::parallel {

struct ProgressSnapshot {
  int64_t finished_requests = 0;
  int64_t total_requests = 0;    // 0: unknown (no ETA, no bar)
  double elapsed_s = 0.0;
  int64_t output_tokens = 0;
  int64_t kv_used_blocks = 0;    // over all ranks, after the last step
  int64_t kv_total_blocks = 0;   // usable blocks over all ranks
  int64_t spec_drafts = 0;       // draft tokens verified so far (0: not speculating)
  int64_t spec_accepted = 0;
};

// "12/64 requests, 345.2 output tok/s, ETA 0:01:23, KV 12.5% (40/320 blocks), acceptance 0.731".
// The ETA extrapolates the request completion rate; it is "?" before the first finish.
std::string format_progress(const ProgressSnapshot& p);
// The terminal form: "[#####---------------] " (20 cells, by finished / total) + format_progress.
std::string format_progress_bar(const ProgressSnapshot& p);

}  // namespace moert::parallel
