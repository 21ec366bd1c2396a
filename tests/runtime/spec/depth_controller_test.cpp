// The depth controller: the fitted step-time line, the probe depth before anything is
// measured, deep speculation when verifying is nearly free, none when the step time grows
// with the tokens (compute bound, e.g. large batches on a CPU).
#include <gtest/gtest.h>

#include "runtime/spec/depth_controller.h"

namespace moert::spec {
namespace {

TEST(LinearTimeModel, FitsALineExactly) {
  LinearTimeModel model;
  for (int n : {1, 4, 16, 64, 2, 8}) model.observe(n, 0.5 + 0.25 * n);
  ASSERT_TRUE(model.has_slope());
  EXPECT_NEAR(model.predict(10), 3.0, 1e-9);
  EXPECT_NEAR(model.predict(100), 25.5, 1e-9);
}

TEST(LinearTimeModel, WithoutSpreadPredictsTheMean) {
  LinearTimeModel model(1.0);
  model.observe(8, 1.0);
  model.observe(8, 3.0);
  EXPECT_FALSE(model.has_slope());
  EXPECT_DOUBLE_EQ(model.predict(100), 2.0);
}

TEST(LinearTimeModel, NegativeSlopeIsClampedToFlat) {
  LinearTimeModel model(1.0);
  model.observe(1, 2.0);
  model.observe(10, 1.0);
  EXPECT_NEAR(model.predict(1000), model.predict(1), 1e-12);
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
  for (int n : {1, 2, 5, 9, 16, 32, 64}) {
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

}  // namespace
}  // namespace moert::spec
