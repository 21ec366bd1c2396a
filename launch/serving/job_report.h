// What rank 0 writes about a batch job besides its results: the per-step metrics JSONL
// (--metrics) and the summary lines of the coordinator's report.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runtime/parallel/batch_job.h"

namespace moert::serving {

// One metrics line: {"step", "rank", "tokens", "output_tokens", "finished", "dispatch_bytes",
// "combine_bytes", "step_s", "all_to_all_s", "expert_s", "shared_s", "spec_drafts",
// "spec_accepted", "draft_s", "kv_cache_bytes_per_token"} (times to the microsecond).
std::string metrics_json(int64_t step, int rank, const parallel::StepMetrics& m, int64_t kv_cache_bytes_per_token);

// One rank's expert-parallel exchange over a run, for `moert bench --json`: {"rank",
// "dispatch_bytes", "combine_bytes" (sent to other ranks), "step_s", "all_to_all_s",
// "exchange_in_flight_s", "exchange_wait_s", "hidden_fraction" (1 - wait / in flight; 0 with no
// exchange)} (docs/ep-exchange.md, "What the summary says").
nlohmann::json exchange_json(int rank, const parallel::StepMetrics& m);

// The --metrics file: opened (truncated) before the job starts, so a bad path is refused before
// any work; a line per rank and step, flushed after the last rank of each step.
class MetricsFile {
 public:
  // io_error naming the path when it cannot be opened for writing.
  static Result<std::unique_ptr<MetricsFile>> open(const std::string& path, int64_t kv_cache_bytes_per_token,
                                                   int world_size);
  // parallel::CoordinatorEvents::on_step_metrics.
  Status write(int64_t step, int rank, const parallel::StepMetrics& m);

 private:
  MetricsFile(std::string path, int64_t kv_cache_bytes_per_token, int world_size)
      : path_(std::move(path)), kv_cache_bytes_per_token_(kv_cache_bytes_per_token), world_size_(world_size) {}
  std::string path_;
  std::ofstream out_;
  int64_t kv_cache_bytes_per_token_;
  int world_size_;
};

// The summary lines of a report (rank 0): per rank, then the job, then balancing.
std::string format_job_summary(const parallel::BatchJobReport& report, parallel::BalanceMode balance);

}  // namespace moert::serving
