#include "launch/serving/job_report.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moert::serving {

std::string metrics_json(int64_t step, int rank, const parallel::StepMetrics& m, int64_t kv_cache_bytes_per_token) {
  char text[768];
  std::snprintf(text, sizeof(text),
                "{\"step\": %lld, \"rank\": %d, \"tokens\": %lld, \"output_tokens\": %lld, \"finished\": %lld, "
                "\"dispatch_bytes\": %lld, \"combine_bytes\": %lld, \"step_s\": %.6f, \"all_to_all_s\": %.6f, "
                "\"expert_s\": %.6f, \"shared_s\": %.6f, \"exchange_in_flight_s\": %.6f, \"exchange_wait_s\": %.6f, "
                "\"spec_drafts\": %lld, \"spec_accepted\": %lld, \"draft_s\": %.6f, \"kv_cache_bytes_per_token\": %lld}",
                static_cast<long long>(step), rank, static_cast<long long>(m.scheduled_tokens),
                static_cast<long long>(m.output_tokens), static_cast<long long>(m.finished_requests),
                static_cast<long long>(m.dispatch_bytes), static_cast<long long>(m.combine_bytes), m.step_s,
                m.all_to_all_s, m.expert_s, m.shared_s, m.exchange_in_flight_s, m.exchange_wait_s,
                static_cast<long long>(m.spec_drafts),
                static_cast<long long>(m.spec_accepted), m.draft_s, static_cast<long long>(kv_cache_bytes_per_token));
  return text;
}

namespace {

// The share of the exchange's time in flight that the rank did not spend waiting for it.
double hidden_fraction(const parallel::StepMetrics& m) {
  return m.exchange_in_flight_s > 0 ? 1.0 - m.exchange_wait_s / m.exchange_in_flight_s : 0.0;
}

}  // namespace

nlohmann::json exchange_json(int rank, const parallel::StepMetrics& m) {
  return {{"rank", rank},
          {"dispatch_bytes", m.dispatch_bytes},
          {"combine_bytes", m.combine_bytes},
          {"step_s", m.step_s},
          {"all_to_all_s", m.all_to_all_s},
          {"exchange_in_flight_s", m.exchange_in_flight_s},
          {"exchange_wait_s", m.exchange_wait_s},
          {"hidden_fraction", hidden_fraction(m)}};
}

Result<std::unique_ptr<MetricsFile>> MetricsFile::open(const std::string& path, int64_t kv_cache_bytes_per_token,
                                                       int world_size) {
  std::unique_ptr<MetricsFile> file(new MetricsFile(path, kv_cache_bytes_per_token, world_size));
  file->out_.open(path, std::ios::trunc);
  if (!file->out_) return io_error("cannot open metrics file " + path);
  return file;
}

Status MetricsFile::write(int64_t step, int rank, const parallel::StepMetrics& m) {
  out_ << metrics_json(step, rank, m, kv_cache_bytes_per_token_) << "\n";
  if (rank == world_size_ - 1) out_.flush();
  if (!out_) return io_error("cannot write metrics file " + path_);
  return Status::ok();
}

std::string format_job_summary(const parallel::BatchJobReport& report, parallel::BalanceMode balance) {
  std::ostringstream out;
  char line[512];
  int64_t output_tokens = 0, prompt_tokens = 0;
  double step_s = 0.0, a2a_s = 0.0;
  for (size_t r = 0; r < report.rank_totals.size(); ++r) {
    const parallel::StepMetrics& m = report.rank_totals[r];
    const engine::EngineStats& e = report.rank_engine_stats[r];
    output_tokens += e.output_tokens;
    prompt_tokens += e.prompt_tokens;
    step_s += m.step_s;
    a2a_s += m.all_to_all_s;
    std::snprintf(line, sizeof(line),
                  "rank %zu: %lld requests, %lld tokens computed, %lld output tokens, %lld preemptions, step %.2f s "
                  "(all-to-all %.2f s = %.1f%%, routed experts %.2f s, shared experts %.2f s), sent %.2f MB dispatch "
                  "+ %.2f MB combine, exchange %.2f s in flight, %.1f%% of it hidden behind compute\n",
                  r, static_cast<long long>(m.finished_requests), static_cast<long long>(m.scheduled_tokens),
                  static_cast<long long>(e.output_tokens), static_cast<long long>(e.preemptions), m.step_s,
                  m.all_to_all_s, m.step_s > 0 ? 100.0 * m.all_to_all_s / m.step_s : 0.0, m.expert_s, m.shared_s,
                  m.dispatch_bytes / 1e6, m.combine_bytes / 1e6, m.exchange_in_flight_s,
                  100.0 * hidden_fraction(m));
    out << line;
  }
  const double wall = report.wall_s > 0 ? report.wall_s : 1e-9;
  std::snprintf(line, sizeof(line),
                "job: %zu ranks, %lld lock-step iterations, %.2f s, output %.1f tok/s (%lld tokens), input %lld "
                "tokens, all-to-all %.1f%% of step time, rows sent as %s (dispatch) and %s (combine)\n",
                report.rank_totals.size(), static_cast<long long>(report.steps), report.wall_s, output_tokens / wall,
                static_cast<long long>(output_tokens), static_cast<long long>(prompt_tokens),
                step_s > 0 ? 100.0 * a2a_s / step_s : 0.0, parallel::payload_dtype_name(report.payload_dtypes.dispatch),
                parallel::payload_dtype_name(report.payload_dtypes.combine));
  out << line;
  std::snprintf(line, sizeof(line),
                "balance %s: expert MaxVio %.3f over the run, %.3f per step (mean over MoE layers); rank compute "
                "MaxVio %.3f over the run, %.3f per step; %d placement(s) installed",
                parallel::balance_mode_name(balance), report.expert_run_max_violation, report.expert_step_max_violation,
                report.rank_run_max_violation, report.rank_step_max_violation, report.rebalances);
  out << line << "\nexpert MaxVio by layer over the run:";
  for (double layer : report.expert_run_max_violation_per_layer) {
    std::snprintf(line, sizeof(line), " %.3f", layer);
    out << line;
  }
  return out.str();
}

}  // namespace moert::serving
