// The depth controller: the table of measured step times, the probe depth before anything is
// measured, deep speculation when verifying is nearly free, none when the step time grows
// with the tokens (compute bound, e.g. large batches on a CPU).
#include <gtest/gtest.h>

#include "runtime/speculative/depth_controller.h"

namespace moert::spec {
namespace {

TEST(StepTimeTable, InterpolatesBetweenObservedSizes) {
  StepTimeTable table(0.5);
  table.observe(1, 0.020);
  table.observe(5, 0.060);
  table.observe(32, 0.100);
  EXPECT_DOUBLE_EQ(table.predict(1), 0.020);
  EXPECT_DOUBLE_EQ(table.predict(3), 0.040);
  EXPECT_NEAR(table.predict(14), 0.060 + 9.0 / 27.0 * 0.040, 1e-15);
  EXPECT_DOUBLE_EQ(table.predict(64), 0.200);  // proportional beyond the largest size
  table.observe(5, 0.080);                     // weighted mean: 0.5 * 0.060 + 0.5 * 0.080
  EXPECT_DOUBLE_EQ(table.predict(5), 0.070);
  EXPECT_EQ(table.num_sizes(), 3u);
}

TEST(StepTimeTable, FlatBelowTheSmallestSize) {
  StepTimeTable table;
  table.observe(8, 0.5);
  EXPECT_DOUBLE_EQ(table.predict(1), 0.5);
  EXPECT_DOUBLE_EQ(table.predict(16), 1.0);
}

TEST(DepthController, FixedDepthIsReturnedAsIs) {
  DepthController controller({5, false, 0.02, 4});
  EXPECT_EQ(controller.choose(1).num_draft, 5);
  EXPECT_EQ(controller.choose(1000).num_draft, 5);
}

TEST(DepthController, ProbesUntilBothCostsAreMeasured) {
  DepthController controller({8, true, 0.02, 3});
  EXPECT_EQ(controller.choose(1).num_draft, 3);
  controller.observe_target_step(1, 0.010);
  EXPECT_EQ(controller.choose(1).num_draft, 3);  // one size only
  controller.observe_target_step(4, 0.011);
  EXPECT_EQ(controller.choose(1).num_draft, 3);  // no draft time yet
  controller.observe_drafting(1, 3, 0.003);
  EXPECT_NE(controller.choose(1).num_draft, 3);
  EXPECT_EQ(controller.choose(0).num_draft, 0);  // nobody decoding
}

// Memory-bound target (10 ms + 0.01 ms per token), a draft at 5% of a step, alpha ~0.9:
// deep speculation at batch 1; a compute-bound target (1 ms per token) switches it off.
TEST(DepthController, DeepWhenVerifyIsCheapOffWhenComputeBound) {
  DepthController cheap({8, true, 0.02, 4});
  DepthController bound({8, true, 0.02, 4});
  for (int n : {1, 2, 5, 9, 16, 32, 64, 144, 288}) {
    cheap.observe_target_step(n, 0.010 + 0.00001 * n);
    bound.observe_target_step(n, 0.001 * n);
  }
  cheap.observe_drafting(1, 4, 4 * 0.0005);
  bound.observe_drafting(1, 4, 4 * 0.00005);
  for (int i = 0; i < 200; ++i) {
    cheap.observe_pass(4, i % 10 == 0 ? 2 : 4);  // 0.9-ish acceptance
    bound.observe_pass(4, i % 10 == 0 ? 2 : 4);
  }
  EXPECT_GT(cheap.alpha(), 0.85);
  const DepthChoice deep = cheap.choose(1);
  EXPECT_GE(deep.num_draft, 5);
  EXPECT_GT(deep.speedup, 3.0);
  EXPECT_EQ(bound.choose(16).num_draft, 0);
}

// An MoE step at batch 1: a 32-token prefill is cheap per token, so the interpolated
// 5-token verify looks cheap and speculation starts; once the real 5-token (and 2-token)
// passes are timed (they read ~3x the expert weights of one token) it stops.
TEST(DepthController, MeasuredVerifyPassesCorrectAnOptimisticInterpolation) {
  DepthController controller({4, true, 0.02, 4});
  controller.observe_target_step(1, 0.020);
  controller.observe_target_step(32, 0.100);
  controller.observe_drafting(1, 4, 4 * 0.003);
  for (int i = 0; i < 100; ++i) controller.observe_pass(4, i % 2 == 0 ? 1 : 2);  // alpha ~ 0.6
  const DepthChoice before = controller.choose(1);
  EXPECT_GE(before.num_draft, 1);
  for (int k = 1; k <= 4; ++k) {
    for (int i = 0; i < 8; ++i) controller.observe_target_step(1 + k, 0.020 + 0.012 * k);
  }
  EXPECT_EQ(controller.choose(1).num_draft, 0);
}

}  // namespace
}  // namespace moert::spec
