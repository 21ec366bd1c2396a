// Exact values of the depth model, the depth choice, the alpha estimator and the
// per-position acceptance statistics.
#include "runtime/speculative/adaptive_depth.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <cmath>
#include <vector>

namespace moert::spec {
namespace {

// Leviathan's model: draft step cost c, verification as cheap as one step.
SpecCostModel draft_cost(double c) {
  SpecCostModel model;
  model.draft_step_cost = c;
  return model;
}

TEST(ExpectedTokensPerPass, ExactValues) {
  EXPECT_EQ(expected_tokens_per_pass(0.5, 0), 1.0);
  EXPECT_EQ(expected_tokens_per_pass(0.5, 1), 1.5);
  EXPECT_EQ(expected_tokens_per_pass(0.5, 2), 1.75);
  EXPECT_EQ(expected_tokens_per_pass(0.5, 3), 1.875);
  EXPECT_EQ(expected_tokens_per_pass(0.0, 5), 1.0);
  EXPECT_EQ(expected_tokens_per_pass(1.0, 4), 5.0);  // the alpha = 1 limit, K + 1
  EXPECT_NEAR(expected_tokens_per_pass(0.8, 3), 2.952, 1e-12);
}

TEST(ExpectedTokensPerPass, MatchesClosedFormAndIsStableNearOne) {
  for (double alpha : {0.1, 0.5, 0.9, 0.99}) {
    for (int k : {1, 2, 4, 8, 16}) {
      EXPECT_NEAR(expected_tokens_per_pass(alpha, k), (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha), 1e-12)
          << alpha << " " << k;
    }
  }
  // 1 - 1e-12: the closed form loses ~4 digits to cancellation; the series stays at K + 1 - O(1e-11).
  EXPECT_NEAR(expected_tokens_per_pass(1.0 - 1e-12, 8), 9.0, 1e-10);
}

TEST(ExpectedSpeedup, LeviathanFormulaAndMeasuredVerifyCost) {
  const SpecCostModel leviathan = draft_cost(0.1);
  EXPECT_NEAR(expected_speedup(0.8, 4, leviathan), 3.3616 / 1.4, 1e-12);
  EXPECT_EQ(expected_speedup(0.8, 0, leviathan), 1.0);
  SpecCostModel moe{.draft_step_cost = 0.0, .verify_cost = {1.0, 1.25, 1.5, 1.75, 2.0}};
  EXPECT_NEAR(expected_speedup(0.8, 3, moe), 2.952 / 1.75, 1e-12);
  EXPECT_EQ(moe.verify_cost_at(4), 2.0);
  EXPECT_EQ(SpecCostModel{}.verify_cost_at(30), 1.0);
}

TEST(ChooseDraftDepth, MaximisesSpeedup) {
  // alpha 0.8, c 0.1: speedups 1.636, 2.033, 2.271, 2.401, 2.460, 2.470 (K = 6), 2.448, 2.405.
  const DepthChoice choice = choose_draft_depth(0.8, draft_cost(0.1), 8);
  EXPECT_EQ(choice.num_draft, 6);
  EXPECT_NEAR(choice.speedup, 2.46964, 1e-12);
  // Capped by max_num_draft.
  EXPECT_EQ(choose_draft_depth(0.8, draft_cost(0.1), 4).num_draft, 4);
  // Free drafts and free verification: deeper is always better.
  EXPECT_EQ(choose_draft_depth(0.5, {}, 8).num_draft, 8);
}

TEST(ChooseDraftDepth, VerifyCostGrowingWithTokensShortensDepth) {
  // MoE-like verification: v(K) = 1 + 0.25 K. Speedups 1.44, 1.627, 1.687 (K = 3), 1.681, ...
  SpecCostModel moe = draft_cost(0.0);
  for (int k = 0; k <= 8; ++k) moe.verify_cost.push_back(1.0 + 0.25 * k);
  const DepthChoice choice = choose_draft_depth(0.8, moe, 8);
  EXPECT_EQ(choice.num_draft, 3);
  EXPECT_NEAR(choice.speedup, 2.952 / 1.75, 1e-12);
}

TEST(ChooseDraftDepth, TiesGoToTheSmallerDepth) {
  // alpha 1: K = 1 gives 2 / 1, K = 2 gives 3 / 1.5; both exactly 2.
  const DepthChoice choice = choose_draft_depth(1.0, {.verify_cost = {1.0, 1.0, 1.5, 4.0}}, 3);
  EXPECT_EQ(choice.num_draft, 1);
  EXPECT_EQ(choice.speedup, 2.0);
}

TEST(ChooseDraftDepth, OffWhenNoDepthPaysForItself) {
  // alpha 0.1, c 0.5: best K = 1 gives 1.1 / 1.5 < 1.
  DepthChoice off = choose_draft_depth(0.1, draft_cost(0.5), 8);
  EXPECT_EQ(off.num_draft, 0);
  EXPECT_EQ(off.speedup, 1.0);
  // alpha 0.2, c 0.15: K = 1 gives 1.2 / 1.15 = 1.0435: on with margin 0.02, off with 0.05.
  EXPECT_EQ(choose_draft_depth(0.2, draft_cost(0.15), 8, 0.02).num_draft, 1);
  EXPECT_EQ(choose_draft_depth(0.2, draft_cost(0.15), 8, 0.05).num_draft, 0);
}

TEST(ValidateCostModel, NamesTheBadValue) {
  EXPECT_TRUE(validate_cost_model({}, 8).is_ok());
  EXPECT_EQ(validate_cost_model(draft_cost(-0.5), 8).message(), "draft_step_cost = -0.5 must be finite and >= 0");
  EXPECT_EQ(validate_cost_model({.verify_cost = {1.0, 0.0, 1.0}}, 2).message(), "verify_cost[1] = 0 must be finite and > 0");
  EXPECT_EQ(validate_cost_model({.verify_cost = {1.0, 1.1}}, 2).message(),
            "verify_cost has 2 entries, needs max_num_draft + 1 = 3");
}

TEST(AcceptanceRateEstimator, ExponentialWeightsExactValues) {
  AcceptanceRateEstimator estimator(/*decay=*/0.5, /*prior_alpha=*/0.5, /*prior_trials=*/2.0);  // A = 1, T = 2
  EXPECT_EQ(estimator.alpha(), 0.5);
  estimator.observe(4, 2);  // tested 3 (2 accepted + the rejected one): A = 2.5, T = 4
  EXPECT_EQ(estimator.alpha(), 0.625);
  estimator.observe(4, 4);  // all tested and accepted: A = 5.25, T = 6
  EXPECT_EQ(estimator.alpha(), 0.875);
  estimator.observe(0, 0);  // nothing tested: unchanged, no decay
  EXPECT_EQ(estimator.alpha(), 0.875);
  estimator.observe(3, 0);  // tested 1: A = 2.625, T = 4
  EXPECT_EQ(estimator.alpha(), 0.65625);
}

TEST(AcceptanceRateEstimator, DecayOneIsTheCumulativeRatioOfTestedDrafts) {
  AcceptanceRateEstimator estimator(1.0, 0.5, 4.0);  // A = 2, T = 4
  estimator.observe(8, 3);  // A = 5, T = 8 (not 12: positions 4..7 were never tested)
  EXPECT_EQ(estimator.alpha(), 0.625);
}

TEST(AcceptanceStats, PerPositionCountsExactValues) {
  AcceptanceStats stats;
  EXPECT_EQ(stats.mean_tokens_per_pass(), 0.0);
  EXPECT_EQ(stats.acceptance_rate(), 0.0);
  stats.record(3, 1);
  stats.record(3, 3);
  stats.record(2, 0);
  stats.record(0, 0);
  stats.record(4, 2);
  EXPECT_EQ(stats.num_passes(), 5);
  EXPECT_EQ(stats.num_draft_tokens(), 12);
  EXPECT_EQ(stats.num_accepted_tokens(), 6);
  EXPECT_EQ(stats.max_num_draft(), 4);
  const std::vector<int64_t> proposed = {4, 4, 3, 1, 0};
  const std::vector<int64_t> tested = {4, 3, 2, 0, 0};
  const std::vector<int64_t> accepted = {3, 2, 1, 0, 0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(stats.proposed_at(i), proposed[i]) << i;
    EXPECT_EQ(stats.tested_at(i), tested[i]) << i;
    EXPECT_EQ(stats.accepted_at(i), accepted[i]) << i;
  }
  EXPECT_DOUBLE_EQ(stats.mean_accepted_per_pass(), 1.2);
  EXPECT_DOUBLE_EQ(stats.mean_tokens_per_pass(), 2.2);
  EXPECT_EQ(stats.acceptance_rate(), 0.5);
  EXPECT_EQ(stats.acceptance_rate_at(0), 0.75);
  EXPECT_EQ(stats.acceptance_rate_at(1), 0.5);
  EXPECT_DOUBLE_EQ(stats.acceptance_rate_at(2), 1.0 / 3.0);
  EXPECT_EQ(stats.conditional_acceptance_at(0), 0.75);
  EXPECT_DOUBLE_EQ(stats.conditional_acceptance_at(1), 2.0 / 3.0);
  EXPECT_EQ(stats.conditional_acceptance_at(2), 0.5);
  EXPECT_EQ(stats.conditional_acceptance_at(3), 0.0);  // never tested
  EXPECT_EQ(stats.acceptance_rate_at(9), 0.0);
}

TEST(AcceptanceStatsDeathTest, AcceptedMustNotExceedProposed) {
  AcceptanceStats stats;
  MOERT_EXPECT_DEATH(stats.record(2, 3), "num_accepted = 3 must be in \\[0, num_proposed = 2\\]");
  AcceptanceRateEstimator estimator;
  MOERT_EXPECT_DEATH(estimator.observe(1, -1), "num_accepted = -1");
}

}  // namespace
}  // namespace moert::spec
