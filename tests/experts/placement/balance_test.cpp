// Load accounting (MaxVio) and the auxiliary-loss-free bias rule.
#include "experts/placement/balance.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

namespace moert::experts {
namespace {

TEST(Balance, BiasMovesTowardsTheMeanAndLeavesBalancedExpertsAlone) {
  // E = 4, total 12, mean 3: expert 0 over, 1 balanced, 2 and 3 under.
  const std::vector<int64_t> load = {6, 3, 2, 1};
  std::vector<float> bias = {0.5f, 0.25f, 0.0f, -0.125f};
  update_balance_bias(load, 0.125f, bias);
  EXPECT_EQ(bias, (std::vector<float>{0.375f, 0.25f, 0.125f, 0.0f}));
}

TEST(Balance, BiasIgnoresALayerWithoutTokens) {
  const std::vector<int64_t> load = {0, 0, 0};
  std::vector<float> bias = {1.0f, 2.0f, 3.0f};
  update_balance_bias(load, 0.5f, bias);
  EXPECT_EQ(bias, (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

TEST(Balance, BiasComparesExactlyWithANonIntegerMean) {
  // total 7 over E = 3: mean 2.33; loads 2 (under) and 3 (over), never "equal".
  const std::vector<int64_t> load = {2, 2, 3};
  std::vector<float> bias(3, 0.0f);
  update_balance_bias(load, 1.0f, bias);
  EXPECT_EQ(bias, (std::vector<float>{1.0f, 1.0f, -1.0f}));
}

TEST(Balance, TrackerReportsBatchAndRunMaxVioOverLayersWithTokens) {
  // L = 3 (layer 1 dense: zeros), E = 2.
  LoadTracker tracker(3, 2);
  tracker.add_step(std::vector<int64_t>{3, 1, 0, 0, 2, 2});  // layer 0: 4 / 2 - 1 = 0.5, layer 2: 0
  EXPECT_DOUBLE_EQ(tracker.last_step_max_violation(), 0.25);
  tracker.add_step(std::vector<int64_t>{0, 0, 0, 0, 0, 0});  // no tokens: not in the step mean
  EXPECT_DOUBLE_EQ(tracker.last_step_max_violation(), 0.0);
  tracker.add_step(std::vector<int64_t>{1, 3, 0, 0, 4, 0});  // layer 0: 0.5, layer 2: 1.0
  EXPECT_DOUBLE_EQ(tracker.last_step_max_violation(), 0.75);
  EXPECT_DOUBLE_EQ(tracker.mean_step_max_violation(), 0.5);
  // Run loads: layer 0 {4, 4} -> 0, layer 2 {6, 2} -> 6 / 4 - 1 = 0.5.
  EXPECT_DOUBLE_EQ(tracker.run_max_violation(0), 0.0);
  EXPECT_DOUBLE_EQ(tracker.run_max_violation(1), 0.0);
  EXPECT_DOUBLE_EQ(tracker.run_max_violation(2), 0.5);
  EXPECT_DOUBLE_EQ(tracker.run_max_violation(), 0.25);
  EXPECT_EQ(tracker.num_steps(), 3);
  EXPECT_EQ(tracker.run_loads(), (std::vector<int64_t>{4, 4, 0, 0, 6, 2}));
}

TEST(BalanceDeathTest, TrackerChecksTheShape) {
  LoadTracker tracker(2, 2);
  MOERT_EXPECT_DEATH(tracker.add_step(std::vector<int64_t>{1, 2, 3}), "expected 4");
}

}  // namespace
}  // namespace moert::experts
