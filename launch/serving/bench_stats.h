// Throughput and latency figures of a benchmark (`moert bench`), from the per-request timings
// of the engine's RequestOutputs: pure logic, no MPI.
//
// Terms (per request, sample 0, from the step that first schedules it, so a concurrency
// limit's queueing is not counted): TTFT = time to its first token; E2E = time to its last;
// TPOT = (E2E - TTFT) / (output tokens - 1), requests with more than one token; ITL = the
// gaps between consecutive tokens (0 between tokens accepted in one speculative pass).
// Throughputs are tokens over the run's wall time: output tokens, and prompt + output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runtime/engine/engine.h"

namespace moert::serving {

// Mean and percentiles; percentile q of n sorted values interpolates linearly between
// ranks floor(h) and ceil(h), h = q / 100 * (n - 1) (numpy's default). All 0 when empty.
struct Distribution {
  int64_t count = 0;
  double mean = 0.0, p50 = 0.0, p90 = 0.0, p99 = 0.0;
};
Distribution summarize(std::vector<double> values);

struct RequestTiming {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // all samples
  double ttft_s = 0.0;
  double e2e_s = 0.0;
  std::vector<double> token_times_s;  // sample 0, from the first schedule
};
// The timings of one finished request.
RequestTiming request_timing(const engine::RequestOutput& output);

// One timed run: every request served and the wall time around it.
struct RunMeasurement {
  double wall_s = 0.0;
  std::vector<RequestTiming> requests;
};

struct BenchResult {
  int ranks = 1;
  int batch_size = 0;         // the concurrency limit (running sequences over all ranks)
  int max_seqs_per_rank = 0;  // what each rank's scheduler allows: ceil(batch_size / ranks)
  int64_t num_requests = 0;   // per run
  int repeats = 0;            // timed runs aggregated
  double input_len = 0.0;     // mean prompt tokens per request
  double output_len = 0.0;    // mean output tokens per request
  // Medians over the repeats, with their minimum and maximum (the spread).
  double output_throughput_tok_s = 0.0, output_throughput_min = 0.0, output_throughput_max = 0.0;
  double total_throughput_tok_s = 0.0, total_throughput_min = 0.0, total_throughput_max = 0.0;
  double wall_s = 0.0;        // median
  // Over every request (or token gap) of every repeat, in milliseconds.
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

// Aggregates the timed runs of one configuration. Precondition: runs is not empty.
BenchResult aggregate(const std::vector<RunMeasurement>& runs, int ranks, int batch_size);

// {"ranks", "batch_size", ..., "ttft_ms": {"mean", "p50", "p90", "p99"}, ...}.
nlohmann::json result_to_json(const BenchResult& result);
// One CSV header line and one row per result, the distributions flattened (ttft_ms_p50, ...).
std::string csv_header();
std::string csv_row(const BenchResult& result);

}  // namespace moert::serving
