// The batch job's progress line: counts, rate, ETA from the completion rate, KV use over
// ranks, acceptance only when speculating, and the 20-cell bar.
#include "launch/serving/progress.h"

#include <gtest/gtest.h>

namespace moert::serving {
namespace {

TEST(JobProgress, FormatsCountsRateEtaKvAndAcceptance) {
  parallel::JobProgress p;
  int64_t total = 64;
  p.finished_requests = 16;
  p.elapsed_s = 30.0;
  p.output_tokens = 3000;
  p.kv_used_blocks = 40;
  p.kv_total_blocks = 320;
  EXPECT_EQ(format_progress(p, total), "16/64 requests, 100.0 output tok/s, ETA 0:01:30, KV 12.5% (40/320 blocks)");
  p.spec_drafts = 1000;
  p.spec_accepted = 731;
  EXPECT_EQ(format_progress(p, total),
            "16/64 requests, 100.0 output tok/s, ETA 0:01:30, KV 12.5% (40/320 blocks), acceptance 0.731");
  EXPECT_EQ(format_progress_bar(p, total).substr(0, 23), "[#####---------------] ");
  p.finished_requests = 0;
  EXPECT_NE(format_progress(p, total).find("ETA ?"), std::string::npos);
  total = 0;  // unknown total: no ETA, empty bar
  p.kv_total_blocks = 0;
  p.spec_drafts = 0;
  EXPECT_EQ(format_progress(p, total), "0 requests, 100.0 output tok/s");
  p.finished_requests = 5000;
  total = 5000;
  p.elapsed_s = 7265.0;
  EXPECT_EQ(format_progress_bar(p, total).substr(0, 22), "[####################]");
  EXPECT_NE(format_progress(p, total).find("ETA 0:00:00"), std::string::npos);
}

}  // namespace
}  // namespace moert::serving
