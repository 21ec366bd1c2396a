// The metrics file and the job summary: what rank 0 writes from the coordinator's records.
#include "launch/serving/job_report.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert::serving {
namespace {

TEST(MetricsFile, OneLinePerRankAndStepAndABadPathIsNamed) {
  testing::ScratchDir scratch("metrics-file");
  const std::string path = scratch / "metrics.jsonl";
  testing::write_file(path, "old content that must go\n");
  {
    auto file = MetricsFile::open(path, /*kv_cache_bytes_per_token=*/4096, /*world_size=*/2);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    parallel::StepMetrics m;
    m.scheduled_tokens = 7;
    m.dispatch_bytes = 1234;
    m.step_s = 0.0015;
    ASSERT_TRUE((*file)->write(0, 0, m).is_ok());
    ASSERT_TRUE((*file)->write(0, 1, m).is_ok());
    // Flushed after the last rank of a step: readable while the job goes on.
    std::ifstream in(path);
    std::string first;
    ASSERT_TRUE(std::getline(in, first));
    const nlohmann::json j = nlohmann::json::parse(first);
    EXPECT_EQ(j["step"], 0);
    EXPECT_EQ(j["rank"], 0);
    EXPECT_EQ(j["tokens"], 7);
    EXPECT_EQ(j["dispatch_bytes"], 1234);
    EXPECT_DOUBLE_EQ(j["step_s"].get<double>(), 0.0015);
    EXPECT_EQ(j["kv_cache_bytes_per_token"], 4096);
  }
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 2);
  const Status bad = MetricsFile::open(scratch / "no-such-dir/m.jsonl", 0, 1).status();
  EXPECT_NE(bad.message().find("cannot open metrics file"), std::string::npos) << bad.to_string();
  EXPECT_NE(bad.message().find("no-such-dir"), std::string::npos) << bad.to_string();
}

TEST(JobSummary, NamesEveryRankTheJobAndTheBalance) {
  parallel::BatchJobReport report;
  report.steps = 10;
  report.wall_s = 2.0;
  report.rank_totals.resize(2);
  report.rank_engine_stats.resize(2);
  report.rank_totals[0].step_s = 1.0;
  report.rank_totals[0].all_to_all_s = 0.25;
  report.rank_totals[1].step_s = 1.0;
  report.rank_engine_stats[0].output_tokens = 30;
  report.rank_engine_stats[1].output_tokens = 10;
  report.expert_run_max_violation_per_layer = {0.0, 0.5};
  const std::string summary = format_job_summary(report, parallel::BalanceMode::kBias);
  EXPECT_NE(summary.find("rank 0: "), std::string::npos);
  EXPECT_NE(summary.find("all-to-all 0.25 s = 25.0%"), std::string::npos) << summary;
  EXPECT_NE(summary.find("rank 1: "), std::string::npos);
  EXPECT_NE(summary.find("job: 2 ranks, 10 lock-step iterations, 2.00 s, output 20.0 tok/s (40 tokens)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("balance bias:"), std::string::npos);
  EXPECT_NE(summary.find("expert MaxVio by layer over the run: 0.000 0.500"), std::string::npos) << summary;
}

}  // namespace
}  // namespace moert::serving
