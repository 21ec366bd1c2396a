// Benchmark figures from request timings: percentiles as numpy computes them, TPOT and ITL
// from token times, throughput medians and spread over repeats, output-line parsing, CSV.
#include "launch/serving/bench_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace moert::serving {
namespace {

TEST(BenchStats, PercentilesInterpolateBetweenRanks) {
  // numpy.percentile([1..10], [50, 90, 99]) = 5.5, 9.1, 9.91
  const Distribution d = summarize({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_EQ(d.count, 10);
  EXPECT_DOUBLE_EQ(d.mean, 5.5);
  EXPECT_DOUBLE_EQ(d.p50, 5.5);
  EXPECT_NEAR(d.p90, 9.1, 1e-12);
  EXPECT_NEAR(d.p99, 9.91, 1e-12);
  const Distribution one = summarize({3.0});
  EXPECT_EQ(one.p50, 3.0);
  EXPECT_EQ(one.p99, 3.0);
  EXPECT_EQ(summarize({}).count, 0);
  EXPECT_EQ(summarize({}).p90, 0.0);
}

TEST(BenchStats, AggregateComputesTpotItlAndThroughputMedians) {
  RequestTiming a{10, 4, 0.010, 0.040, {0.010, 0.020, 0.030, 0.040}};  // TPOT 10 ms, ITL 10 ms x 3
  RequestTiming b{20, 1, 0.005, 0.005, {0.005}};                       // one token: no TPOT, no ITL
  RequestTiming c{30, 3, 0.002, 0.012, {0.002, 0.002, 0.012}};         // a speculative pair: ITL 0 then 10
  const std::vector<RunMeasurement> runs = {{1.0, {a, b}}, {2.0, {a, c}}, {0.5, {b, c}}};
  const BenchResult r = aggregate(runs, 2, 3);
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.batch_size, 3);
  EXPECT_EQ(r.max_seqs_per_rank, 2);
  EXPECT_EQ(r.repeats, 3);
  EXPECT_EQ(r.num_requests, 2);
  EXPECT_DOUBLE_EQ(r.input_len, (10 + 20 + 10 + 30 + 20 + 30) / 6.0);
  EXPECT_DOUBLE_EQ(r.output_len, (4 + 1 + 4 + 3 + 1 + 3) / 6.0);
  // Output tokens per second of the runs: 5 / 1, 7 / 2, 4 / 0.5 -> median 5, spread 3.5 .. 8.
  EXPECT_DOUBLE_EQ(r.output_throughput_tok_s, 5.0);
  EXPECT_DOUBLE_EQ(r.output_throughput_min, 3.5);
  EXPECT_DOUBLE_EQ(r.output_throughput_max, 8.0);
  EXPECT_DOUBLE_EQ(r.total_throughput_tok_s, 35.0);  // (30 + 5) / 1, (40 + 7) / 2, (50 + 4) / 0.5
  EXPECT_DOUBLE_EQ(r.wall_s, 1.0);
  EXPECT_EQ(r.ttft_ms.count, 6);
  EXPECT_EQ(r.tpot_ms.count, 4);  // a twice, c twice
  EXPECT_NEAR(r.tpot_ms.mean, (10 + 10 + 5 + 5) / 4.0, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 3 + 3 + 2 + 2);
  EXPECT_NEAR(r.itl_ms.p50, 10.0, 1e-9);
  EXPECT_NEAR(r.e2e_ms.p50, 12.0, 1e-9);  // sorted 5 5 12 12 40 40
}

TEST(BenchStats, TimingsComeFromTheRequestOutput) {
  engine::RequestOutput output;
  output.prompt_tokens = 5;
  output.output_tokens = 2;
  output.ttft_s = 0.5;
  output.e2e_s = 0.75;
  output.time_s = 9.0;  // from add_request: not a benchmark figure
  output.token_times_s = {0.5, 0.75};
  const RequestTiming t = request_timing(output);
  EXPECT_EQ(t.prompt_tokens, 5);
  EXPECT_EQ(t.output_tokens, 2);
  EXPECT_EQ(t.ttft_s, 0.5);
  EXPECT_EQ(t.e2e_s, 0.75);
  EXPECT_EQ(t.token_times_s, (std::vector<double>{0.5, 0.75}));
}

TEST(BenchStats, CsvRowsMatchTheHeader) {
  const BenchResult r = aggregate({{1.0, {{4, 2, 0.1, 0.2, {0.1, 0.2}}}}}, 1, 1);
  const std::string header = csv_header(), row = csv_row(r);
  auto columns = [](const std::string& line) { return std::count(line.begin(), line.end(), ',') + 1; };
  EXPECT_EQ(columns(header), columns(row));
  EXPECT_EQ(header.rfind("ranks,batch_size,", 0), 0u);
  EXPECT_NE(header.find("ttft_ms_p99"), std::string::npos);
  EXPECT_EQ(row.rfind("1,1,1,1,4.000,2.000,", 0), 0u) << row;
  const nlohmann::json j = result_to_json(r);
  EXPECT_EQ(j.at("ttft_ms").at("p50"), 100.0);
  EXPECT_EQ(j.at("output_throughput_tok_s"), 2.0);
}

}  // namespace
}  // namespace moert::serving
