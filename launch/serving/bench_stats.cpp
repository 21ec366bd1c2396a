#include "launch/serving/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace moert::serving {

using nlohmann::json;

namespace {

double percentile(const std::vector<double>& sorted, double q) {
  const double h = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h)), hi = static_cast<size_t>(std::ceil(h));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (h - static_cast<double>(lo));
}

double median(std::vector<double> values) { return summarize(std::move(values)).p50; }

json distribution_json(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"count", d.count}};
}

}  // namespace

Distribution summarize(std::vector<double> values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0.0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.p50 = percentile(values, 50.0);
  d.p90 = percentile(values, 90.0);
  d.p99 = percentile(values, 99.0);
  return d;
}

RequestTiming request_timing(const engine::RequestOutput& output) {
  RequestTiming t;
  t.prompt_tokens = output.prompt_tokens;
  t.output_tokens = output.output_tokens;
  t.ttft_s = output.ttft_s;
  t.e2e_s = output.e2e_s;
  t.token_times_s = output.token_times_s;
  return t;
}

BenchResult aggregate(const std::vector<RunMeasurement>& runs, int ranks, int batch_size) {
  BenchResult r;
  r.ranks = ranks;
  r.batch_size = batch_size;
  r.max_seqs_per_rank = (batch_size + ranks - 1) / std::max(ranks, 1);
  r.repeats = static_cast<int>(runs.size());
  r.num_requests = runs.empty() ? 0 : static_cast<int64_t>(runs.front().requests.size());
  std::vector<double> output_rates, total_rates, walls, ttft, tpot, itl, e2e;
  double prompt_sum = 0.0, output_sum = 0.0, request_count = 0.0;
  for (const RunMeasurement& run : runs) {
    int64_t prompt = 0, output = 0;
    for (const RequestTiming& t : run.requests) {
      prompt += t.prompt_tokens;
      output += t.output_tokens;
      ttft.push_back(t.ttft_s * 1e3);
      e2e.push_back(t.e2e_s * 1e3);
      const auto tokens = static_cast<int64_t>(t.token_times_s.size());
      if (tokens > 1) tpot.push_back((t.e2e_s - t.ttft_s) * 1e3 / static_cast<double>(tokens - 1));
      for (size_t i = 1; i < t.token_times_s.size(); ++i) itl.push_back((t.token_times_s[i] - t.token_times_s[i - 1]) * 1e3);
    }
    prompt_sum += static_cast<double>(prompt);
    output_sum += static_cast<double>(output);
    request_count += static_cast<double>(run.requests.size());
    const double wall = std::max(run.wall_s, 1e-9);
    walls.push_back(run.wall_s);
    output_rates.push_back(static_cast<double>(output) / wall);
    total_rates.push_back(static_cast<double>(prompt + output) / wall);
  }
  if (request_count > 0) {
    r.input_len = prompt_sum / request_count;
    r.output_len = output_sum / request_count;
  }
  if (!runs.empty()) {
    r.output_throughput_tok_s = median(output_rates);
    r.output_throughput_min = *std::min_element(output_rates.begin(), output_rates.end());
    r.output_throughput_max = *std::max_element(output_rates.begin(), output_rates.end());
    r.total_throughput_tok_s = median(total_rates);
    r.total_throughput_min = *std::min_element(total_rates.begin(), total_rates.end());
    r.total_throughput_max = *std::max_element(total_rates.begin(), total_rates.end());
    r.wall_s = median(walls);
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
  return r;
}

json result_to_json(const BenchResult& r) {
  return {{"ranks", r.ranks},
          {"batch_size", r.batch_size},
          {"max_seqs_per_rank", r.max_seqs_per_rank},
          {"num_requests", r.num_requests},
          {"repeats", r.repeats},
          {"input_len", r.input_len},
          {"output_len", r.output_len},
          {"wall_s", r.wall_s},
          {"output_throughput_tok_s", r.output_throughput_tok_s},
          {"output_throughput_tok_s_min", r.output_throughput_min},
          {"output_throughput_tok_s_max", r.output_throughput_max},
          {"total_throughput_tok_s", r.total_throughput_tok_s},
          {"total_throughput_tok_s_min", r.total_throughput_min},
          {"total_throughput_tok_s_max", r.total_throughput_max},
          {"ttft_ms", distribution_json(r.ttft_ms)},
          {"tpot_ms", distribution_json(r.tpot_ms)},
          {"itl_ms", distribution_json(r.itl_ms)},
          {"e2e_ms", distribution_json(r.e2e_ms)}};
}

std::string csv_header() {
  std::string header =
      "ranks,batch_size,num_requests,repeats,input_len,output_len,wall_s,output_throughput_tok_s,"
      "output_throughput_tok_s_min,output_throughput_tok_s_max,total_throughput_tok_s,total_throughput_tok_s_min,"
      "total_throughput_tok_s_max";
  for (const char* name : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    for (const char* stat : {"mean", "p50", "p90", "p99"}) header += std::string(",") + name + "_" + stat;
  }
  return header;
}

std::string csv_row(const BenchResult& r) {
  char text[256];
  std::snprintf(text, sizeof(text), "%d,%d,%lld,%d,%.3f,%.3f,%.6f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f", r.ranks,
                r.batch_size, static_cast<long long>(r.num_requests), r.repeats, r.input_len, r.output_len, r.wall_s,
                r.output_throughput_tok_s, r.output_throughput_min, r.output_throughput_max, r.total_throughput_tok_s,
                r.total_throughput_min, r.total_throughput_max);
  std::string row = text;
  for (const Distribution* d : {&r.ttft_ms, &r.tpot_ms, &r.itl_ms, &r.e2e_ms}) {
    std::snprintf(text, sizeof(text), ",%.4f,%.4f,%.4f,%.4f", d->mean, d->p50, d->p90, d->p99);
    row += text;
  }
  return row;
}

}  // namespace moert::serving
