// Router tests. Expected weights were computed in float64 (python3, plain math module)
// from the formulas of docs/moe.md §1 and are compared with relative tolerance 1e-6.
// Shapes: T tokens, E experts, K top-k, G groups.
#include "experts/router.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"
#include "tests/support/reference_routing.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moert::experts {
namespace {

constexpr double kRelTol = 1e-6;

struct Routed {
  std::vector<int32_t> ids;  // [T, K]
  std::vector<float> weights;  // [T, K]
};

Routed route(const RouterConfig& config, const std::vector<float>& logits, const float* bias = nullptr) {
  const int64_t num_tokens = static_cast<int64_t>(logits.size()) / config.num_experts;
  Routed out;
  out.ids.assign(static_cast<size_t>(num_tokens * config.top_k), -1);
  out.weights.assign(static_cast<size_t>(num_tokens * config.top_k), NAN);
  route_tokens(config, logits.data(), num_tokens, bias, out.ids.data(), out.weights.data());
  return out;
}

void expect_weights_near(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t j = 0; j < expected.size(); ++j) {
    EXPECT_NEAR(actual[j], expected[j], kRelTol * std::abs(expected[j])) << "weight " << j;
  }
}

RouterConfig softmax_config(int num_experts, int top_k, bool norm) {
  RouterConfig config;
  config.num_experts = num_experts;
  config.top_k = top_k;
  config.score_func = ScoreFunc::kSoftmax;
  config.norm_topk_prob = norm;
  return config;
}

RouterConfig sigmoid_config(int num_experts, int top_k, int n_group, int topk_group, float scale) {
  RouterConfig config;
  config.num_experts = num_experts;
  config.top_k = top_k;
  config.score_func = ScoreFunc::kSigmoid;
  config.norm_topk_prob = true;
  config.routed_scaling_factor = scale;
  config.n_group = n_group;
  config.topk_group = topk_group;
  return config;
}

const std::vector<float> kMixtralLogits = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 0.0f, -0.5f, 1.0f};  // [1, 8]

TEST(Router, MixtralSoftmaxRenormalisesTopK) {
  const RouterConfig config = softmax_config(8, 2, /*norm=*/true);
  ASSERT_TRUE(validate_router_config(config).is_ok());
  const Routed r = route(config, kMixtralLogits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  // e^2 / (e^2 + e^1.5), e^1.5 / (e^2 + e^1.5)
  expect_weights_near(r.weights, {0.62245933120185459, 0.37754066879814546});
}

TEST(Router, SoftmaxBalancingBiasSelectsButWeightsStayUnbiased) {
  const RouterConfig config = softmax_config(8, 2, /*norm=*/true);
  // p = 0.389, 0.236 for experts 1, 3 and 0.143 for expert 7: +0.2 lifts 7 above 3.
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.2f};
  const Routed r = route(config, kMixtralLogits, bias.data());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 7}));
  // e^2 / (e^2 + e^1), e^1 / (e^2 + e^1): the bias does not enter the weights.
  expect_weights_near(r.weights, {0.7310585786300049, 0.2689414213699951});
}

TEST(Router, Qwen2SoftmaxWithoutRenormKeepsRawProbabilities) {
  const RouterConfig config = softmax_config(8, 2, /*norm=*/false);
  const Routed r = route(config, kMixtralLogits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  expect_weights_near(r.weights, {0.3885200719494275, 0.23564933555108608});
}

TEST(Router, Qwen3SoftmaxRenormTopFour) {
  const RouterConfig config = softmax_config(8, 4, /*norm=*/true);
  const Routed r = route(config, {0.25f, -0.75f, 1.25f, 0.5f, 2.0f, -1.5f, 0.75f, 1.75f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 7, 2, 6}));
  expect_weights_near(r.weights,
                      {0.39406193854791877, 0.30689574631975497, 0.18614167947832197, 0.11290063565400417});
  float sum = 0.0f;
  for (float w : r.weights) sum += w;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
}

TEST(Router, RoutedScalingFactorMultipliesSoftmaxWeights) {
  RouterConfig config = softmax_config(8, 2, /*norm=*/true);
  config.routed_scaling_factor = 2.0f;
  const Routed r = route(config, kMixtralLogits);
  expect_weights_near(r.weights, {2 * 0.62245933120185459, 2 * 0.37754066879814546});
}

TEST(Router, TiesGoToTheLowestExpertId) {
  // Experts 1, 2 and 4 share the top logit; 6 is next.
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f, -1.0f, 2.0f, 0.5f};
  const Routed two = route(softmax_config(8, 2, false), logits);
  EXPECT_EQ(two.ids, (std::vector<int32_t>{1, 2}));
  const Routed three = route(softmax_config(8, 3, false), logits);
  EXPECT_EQ(three.ids, (std::vector<int32_t>{1, 2, 4}));
  expect_weights_near(three.weights, {0.27371745080955079, 0.27371745080955079, 0.27371745080955079});
  const Routed four = route(softmax_config(8, 4, false), logits);
  EXPECT_EQ(four.ids, (std::vector<int32_t>{1, 2, 4, 6}));

  // Sigmoid with a bias that makes expert 3 tie expert 0 on the selection score.
  RouterConfig config = sigmoid_config(4, 2, 1, 1, 1.0f);
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.5f};
  const Routed sig = route(config, {0.0f, -4.0f, -4.0f, -100.0f}, bias.data());
  // c = [0.5, s(-4), s(-4), s(-100) + 0.5]: in float exp(100) overflows to inf, so
  // s(-100) == 0 and c[3] == c[0] == 0.5 exactly.
  EXPECT_EQ(sig.ids, (std::vector<int32_t>{0, 3}));
}

TEST(Router, GroupTiesGoToTheLowestGroupId) {
  const RouterConfig config = sigmoid_config(4, 1, /*n_group=*/2, /*topk_group=*/1, 2.5f);
  const Routed r = route(config, {0.0f, 0.0f, 0.0f, 0.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0}));
  expect_weights_near(r.weights, {2.5});
}

const std::vector<float> kGlmLogits = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f, 1.5f, -0.5f, 0.25f};  // [1, 8]

TEST(Router, GlmSingleGroupBiasSelectsButWeightsAreUnbiasedSigmoids) {
  const RouterConfig config = sigmoid_config(8, 2, 1, 1, 2.5f);
  ASSERT_TRUE(validate_router_config(config).is_ok());

  const Routed plain = route(config, kGlmLogits);
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{0, 5}));
  expect_weights_near(plain.weights, {1.2965317804200089, 1.2034682195799915});

  // The bias lifts expert 2 (s = 0.622 + 0.625) above expert 0 (s = 0.881) and pushes
  // expert 5 out; weights are 2.5 * s / (s2 + s0), the bias does not enter them.
  const std::vector<float> bias = {0.0f, 0.0f, 0.625f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const Routed biased = route(config, kGlmLogits, bias.data());
  EXPECT_EQ(biased.ids, (std::vector<int32_t>{2, 0}));
  expect_weights_near(biased.weights, {1.0351848949400193, 1.4648151050599809});
}

TEST(Router, DeepSeekV3GroupLimitedBiasChangesGroupsNotWeightFormula) {
  // E = 8, G = 4 (2 experts each), keep 2 groups, K = 2.
  const RouterConfig config = sigmoid_config(8, 2, /*n_group=*/4, /*topk_group=*/2, 2.5f);
  ASSERT_TRUE(validate_router_config(config).is_ok());
  const std::vector<float> logits = {1.0f, 0.5f, 2.0f, -2.0f, 0.0f, 0.25f, -1.0f, 1.5f};

  // Without bias the group scores (top-2 sums) are 1.353, 1.000, 1.062, 1.087: groups 0
  // and 3 are kept, so expert 2 (highest s overall, group 1) is not selected.
  const Routed plain = route(config, logits);
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{7, 0}));
  expect_weights_near(plain.weights, {1.319832470395554, 1.1801675296044463});

  // A bias of 0.5 on group 2 makes it the best group: groups 2 and 0 are kept, and the
  // biased experts 5, 4 outrank expert 0; weights are still 2.5 * s / (s5 + s4).
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.0f, 0.0f};
  const Routed biased = route(config, logits, bias.data());
  EXPECT_EQ(biased.ids, (std::vector<int32_t>{5, 4}));
  expect_weights_near(biased.weights, {1.3231711029592845, 1.176828897040715});
}

TEST(Router, DroppedGroupsAreMaskedWithMinusInfinity) {
  // E = 4, G = 2, keep 1 group, K = 2. Group 0 wins (c = 1.453 + -0.375 vs 0.538), and its
  // expert 1 has c = 0.5 - 0.875 < 0. Masking group 1 with 0 would pick expert 2 instead
  // (the Hugging Face behaviour, ids {0, 2}, weights 0.7798, 0.2202); -inf keeps expert 1.
  const RouterConfig config = sigmoid_config(4, 2, /*n_group=*/2, /*topk_group=*/1, 1.0f);
  const std::vector<float> bias = {0.5f, -0.875f, 0.0f, 0.0f};
  const Routed r = route(config, {3.0f, 0.0f, -1.0f, -1.0f}, bias.data());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  expect_weights_near(r.weights, {0.65578348755683069, 0.34421651244316936});
}

void expect_rows_independent(const RouterConfig& config, const float* bias, uint32_t seed) {
  constexpr int64_t kNumTokens = 37;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(kNumTokens * config.num_experts));  // [T, E]
  for (float& v : logits) v = normal(gen);
  // Duplicate some values inside rows to exercise tie-breaking.
  for (int64_t t = 0; t < kNumTokens; t += 3) logits[t * config.num_experts + 1] = logits[t * config.num_experts];

  const Routed batch = route(config, logits, bias);
  const int k = config.top_k;
  for (int64_t t = 0; t < kNumTokens; ++t) {
    const std::vector<float> row(logits.begin() + t * config.num_experts,
                                 logits.begin() + (t + 1) * config.num_experts);
    const Routed single = route(config, row, bias);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(single.ids[j], batch.ids[t * k + j]) << "token " << t << " slot " << j;
      EXPECT_EQ(single.weights[j], batch.weights[t * k + j]) << "token " << t << " slot " << j;  // bitwise
    }
    // Descending selection order means distinct ids.
    for (int i = 0; i < k; ++i) {
      for (int j = i + 1; j < k; ++j) EXPECT_NE(batch.ids[t * k + i], batch.ids[t * k + j]);
    }
  }
  // Deterministic: routing the batch again gives the same bits.
  const Routed again = route(config, logits, bias);
  EXPECT_EQ(again.ids, batch.ids);
  EXPECT_EQ(again.weights, batch.weights);
}

TEST(Router, RowsAreIndependentOfBatching) {
  expect_rows_independent(softmax_config(16, 4, true), nullptr, 1);
  expect_rows_independent(softmax_config(16, 2, false), nullptr, 2);
  std::vector<float> bias(32);
  for (size_t e = 0; e < bias.size(); ++e) bias[e] = 0.05f * static_cast<float>(e % 7) - 0.1f;
  expect_rows_independent(sigmoid_config(32, 4, /*n_group=*/4, /*topk_group=*/2, 2.5f), bias.data(), 3);
  expect_rows_independent(sigmoid_config(32, 8, /*n_group=*/1, /*topk_group=*/1, 2.5f), bias.data(), 4);
  expect_rows_independent(sigmoid_config(8, 2, /*n_group=*/8, /*topk_group=*/3, 1.0f), nullptr, 5);
}

TEST(Router, ZeroTokensWritesNothing) {
  const RouterConfig config = softmax_config(8, 2, true);
  route_tokens(config, nullptr, 0, nullptr, nullptr, nullptr);  // null buffers are never touched
  std::vector<float> logits(8, 1.0f);
  std::vector<int32_t> ids(4, -7);
  std::vector<float> weights(4, 42.0f);
  route_tokens(config, logits.data(), 0, nullptr, ids.data(), weights.data());
  EXPECT_EQ(ids, std::vector<int32_t>(4, -7));
  EXPECT_EQ(weights, std::vector<float>(4, 42.0f));
}

// The host router against the float64 reference every backend is also checked against
// (tests/support/reference_routing.h), on random logits with exact ties, every rule.
TEST(Router, MatchesTheFloat64ReferenceOnRandomRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const RouterConfig configs[] = {softmax_config(8, 2, false), softmax_config(60, 4, true),
                                  sigmoid_config(16, 4, 4, 2, 2.5f), sigmoid_config(8, 3, 8, 4, 1.0f),
                                  sigmoid_config(12, 2, 1, 1, 1.5f), sigmoid_config(64, 8, 8, 4, 2.5f)};
  for (const RouterConfig& config : configs) {
    ASSERT_TRUE(validate_router_config(config).is_ok());
    const int tokens = 33;
    std::vector<float> logits(static_cast<size_t>(tokens * config.num_experts));
    for (float& l : logits) l = normal(rng);
    for (size_t i = 0; i < logits.size(); i += 5) logits[i] = 0.5f;  // ties
    std::vector<float> bias(static_cast<size_t>(config.num_experts));
    for (float& b : bias) b = 0.05f * normal(rng);
    for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
      const Routed r = route(config, logits, b);
      const testing::ReferenceRoute expected = testing::reference_route(config, logits, b);
      EXPECT_EQ(r.ids, expected.ids) << config.num_experts << " experts";
      expect_weights_near(r.weights, expected.weights);
    }
  }
}

void expect_rejected(const RouterConfig& config, const std::string& fragment) {
  const Status status = validate_router_config(config);
  EXPECT_FALSE(status.is_ok()) << fragment;
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

TEST(Router, ValidateRejectsBadConfigsNamingTheValue) {
  EXPECT_TRUE(validate_router_config(sigmoid_config(256, 8, 8, 4, 2.5f)).is_ok());  // DeepSeek-V3
  EXPECT_TRUE(validate_router_config(sigmoid_config(160, 8, 1, 1, 2.5f)).is_ok());  // GLM-4.7
  EXPECT_TRUE(validate_router_config(softmax_config(128, 8, true)).is_ok());        // Qwen3

  expect_rejected(softmax_config(0, 1, false), "num_experts = 0");
  expect_rejected(softmax_config(-3, 1, false), "num_experts = -3");
  expect_rejected(softmax_config(8, 0, false), "top_k = 0");
  expect_rejected(softmax_config(8, 9, false), "top_k = 9");
  expect_rejected(sigmoid_config(10, 2, 4, 1, 1.0f), "n_group = 4");  // 10 % 4 != 0
  expect_rejected(sigmoid_config(8, 2, 0, 1, 1.0f), "n_group = 0");
  expect_rejected(sigmoid_config(8, 2, 4, 0, 1.0f), "topk_group = 0");
  expect_rejected(sigmoid_config(8, 2, 4, 5, 1.0f), "topk_group = 5");
  // 2 kept groups of 2 experts leave 4 selectable experts, fewer than K = 5.
  expect_rejected(sigmoid_config(8, 5, 4, 2, 1.0f), "top_k = 5");
  RouterConfig grouped_softmax = softmax_config(8, 2, true);
  grouped_softmax.n_group = 2;
  expect_rejected(grouped_softmax, "n_group = 2");
  expect_rejected(sigmoid_config(8, 2, 1, 1, 0.0f), "routed_scaling_factor");
  expect_rejected(sigmoid_config(8, 2, 1, 1, NAN), "routed_scaling_factor");
}

TEST(RouterDeathTest, RouteTokensChecksItsPreconditions) {
  const RouterConfig bad = softmax_config(8, 9, false);
  std::vector<float> logits(8, 0.0f);
  std::vector<int32_t> ids(9);
  std::vector<float> weights(9);
  MOERT_EXPECT_DEATH(route_tokens(bad, logits.data(), 1, nullptr, ids.data(), weights.data()), "top_k = 9");
  const RouterConfig good = softmax_config(8, 2, false);
  logits[3] = NAN;
  MOERT_EXPECT_DEATH(route_tokens(good, logits.data(), 1, nullptr, ids.data(), weights.data()), "logits\\[0, 3\\]");
}

TEST(Router, CountTokensPerExpert) {
  const std::vector<int32_t> ids = {0, 1, 1, 2, 1, 3};  // [T = 3, K = 2]
  const std::vector<int64_t> load = count_tokens_per_expert(ids.data(), 3, 2, 5);
  EXPECT_EQ(load, (std::vector<int64_t>{1, 3, 1, 1, 0}));
  EXPECT_EQ(count_tokens_per_expert(nullptr, 0, 2, 3), (std::vector<int64_t>{0, 0, 0}));
}

TEST(RouterDeathTest, CountTokensPerExpertChecksIds) {
  const std::vector<int32_t> bad = {0, 4};  // [T = 1, K = 2], E = 4
  MOERT_EXPECT_DEATH(count_tokens_per_expert(bad.data(), 1, 2, 4), "expert_ids\\[0, 1\\] = 4");
}

TEST(Router, MaxViolation) {
  // mean = 6 / 4 = 1.5, max = 3: (3 - 1.5) / 1.5 = 1.
  EXPECT_DOUBLE_EQ(max_violation({1, 3, 1, 1}), 1.0);
  // mean = 6 / 5 = 1.2, max = 3: 1.5.
  EXPECT_DOUBLE_EQ(max_violation({1, 3, 1, 1, 0}), 1.5);
  EXPECT_DOUBLE_EQ(max_violation({4, 4, 4}), 0.0);
  EXPECT_DOUBLE_EQ(max_violation({0, 0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(max_violation({}), 0.0);
  // Everything on one of 8 experts: (8 - 1) / 1 = 7 = E - 1.
  EXPECT_DOUBLE_EQ(max_violation({8, 0, 0, 0, 0, 0, 0, 0}), 7.0);
  // Routing output feeds it directly.
  const std::vector<int32_t> ids = {0, 1, 0, 2, 0, 3, 0, 1};  // [T = 4, K = 2]
  EXPECT_DOUBLE_EQ(max_violation(count_tokens_per_expert(ids.data(), 4, 2, 4)), 1.0);  // mean 2, max 4
}

}  // namespace
}  // namespace moert::experts
