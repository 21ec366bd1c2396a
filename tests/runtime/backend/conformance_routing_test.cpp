// Backend conformance (conformance_test.cpp): routers (softmax top-k and every rule against
// the float64 reference) and row sampling against the float64 reference sampler.
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"

namespace moert::backend::conformance {
namespace {

TEST_P(Conformance, RouteSelectsTheTopKOfTheSoftmaxAndAddsAndArgmaxAreExact) {
  experts::RouterConfig config;
  config.num_experts = 9;
  config.top_k = 3;
  config.norm_topk_prob = true;
  const int64_t tokens = 7;
  std::vector<float> logits = random_floats(tokens * config.num_experts, 2.0f);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * config.top_k));
  std::vector<float> weights(ids.size());
  backend_->route(config, logits, tokens, nullptr, ids, weights);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(config.num_experts));
    std::iota(order.begin(), order.end(), 0);
    const float* row = logits.data() + t * config.num_experts;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    double sum = 0.0;
    for (int k = 0; k < config.top_k; ++k) sum += std::exp(static_cast<double>(row[order[static_cast<size_t>(k)]]));
    std::vector<double> expected;
    for (int k = 0; k < config.top_k; ++k) {
      EXPECT_EQ(ids[static_cast<size_t>(t * config.top_k + k)], order[static_cast<size_t>(k)]) << "token " << t;
      expected.push_back(std::exp(static_cast<double>(row[order[static_cast<size_t>(k)]])) / sum);
    }
    EXPECT_LT(relative_l2_error(weights.data() + t * config.top_k, expected.data(), config.top_k), kTolerance);
  }

  std::vector<float> a = random_floats(13), b = random_floats(13);
  std::vector<double> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = static_cast<double>(static_cast<float>(a[i] + b[i]));
  backend_->add(a, b, 13);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], sum[i]);

  const std::vector<float> rows{0.5f, 2.0f, 2.0f, -1.0f,  // tie: the lowest id wins
                                -3.0f, -2.0f, -7.0f, -2.5f};
  std::vector<int32_t> best(2, -1);
  backend_->argmax_rows(rows, 2, 4, best);
  EXPECT_EQ(best, (std::vector<int32_t>{1, 1}));
}

// Every routing rule against the float64 reference router (tests/support/reference_routing.h,
// written apart from experts/router.cpp): softmax with and without a
// balancing bias, DeepSeek-V3 sigmoid + correction bias + group limit with renormalisation
// and scaling, groups of one; ids exactly, weights within float rounding.
TEST_P(Conformance, RouteMatchesTheFloat64ReferenceForEveryRule) {
  struct Case {
    experts::ScoreFunc score;
    int experts, top_k, n_group, topk_group;
    bool norm, bias;
    float scale;
  };
  const std::vector<Case> cases = {{experts::ScoreFunc::kSoftmax, 8, 2, 1, 1, false, false, 1.0f},
                                   {experts::ScoreFunc::kSoftmax, 60, 4, 1, 1, true, true, 1.0f},
                                   {experts::ScoreFunc::kSigmoid, 16, 4, 4, 2, true, true, 2.5f},
                                   {experts::ScoreFunc::kSigmoid, 8, 3, 8, 4, false, true, 1.0f},
                                   {experts::ScoreFunc::kSigmoid, 12, 2, 1, 1, true, false, 1.5f}};
  for (const Case& c : cases) {
    experts::RouterConfig config;
    config.num_experts = c.experts;
    config.top_k = c.top_k;
    config.score_func = c.score;
    config.n_group = c.n_group;
    config.topk_group = c.topk_group;
    config.norm_topk_prob = c.norm;
    config.routed_scaling_factor = c.scale;
    const int64_t tokens = 21;
    std::vector<float> logits = random_floats(tokens * c.experts, 2.0f);
    for (int64_t i = 0; i < tokens * c.experts; i += 5) logits[static_cast<size_t>(i)] = 0.5f;  // ties
    const std::vector<float> bias = random_floats(c.experts, 0.1f);
    const float* bias_or_null = c.bias ? bias.data() : nullptr;
    const auto count = static_cast<size_t>(tokens * c.top_k);
    std::vector<int32_t> ids(count);
    std::vector<float> weights(count);
    backend_->route(config, logits, tokens, bias_or_null, ids, weights);
    const testing::ReferenceRoute expected = testing::reference_route(config, logits, bias_or_null);
    EXPECT_EQ(ids, expected.ids) << c.experts << " experts";
    EXPECT_LT(relative_l2_error(weights.data(), expected.weights.data(), static_cast<int64_t>(count)), 1e-6);
  }
}

// A router beyond a backend's capabilities (600 experts, 80 groups: past the CUDA router's 512
// and 64) still routes through route_on, on the host where the backend cannot: the reference's
// ids, weights within float rounding; within them route_on and route() agree exactly.
TEST_P(Conformance, RouteOnTakesRoutersBeyondTheBackendsCapabilities) {
  experts::RouterConfig config;
  config.num_experts = 640;
  config.top_k = 8;
  config.score_func = experts::ScoreFunc::kSigmoid;
  config.n_group = 80;
  config.topk_group = 4;
  config.norm_topk_prob = true;
  config.routed_scaling_factor = 2.5f;
  ASSERT_TRUE(experts::validate_router_config(config).is_ok());
  const int64_t tokens = 7;
  const std::vector<float> logits = random_floats(tokens * config.num_experts, 2.0f);
  const std::vector<float> bias = random_floats(config.num_experts, 0.1f);
  const auto count = static_cast<size_t>(tokens * config.top_k);
  std::vector<int32_t> ids(count, -1);
  std::vector<float> weights(count);
  route_on(*backend_, config, logits, tokens, bias.data(), ids, weights);
  const testing::ReferenceRoute expected = testing::reference_route(config, logits, bias.data());
  EXPECT_EQ(ids, expected.ids);
  EXPECT_LT(relative_l2_error(weights.data(), expected.weights.data(), static_cast<int64_t>(count)), 1e-6);
  const Backend::Capabilities caps = backend_->capabilities();
  config.num_experts = std::min(caps.max_router_experts, 64);
  config.n_group = 8;
  const std::vector<float> small = random_floats(tokens * config.num_experts, 2.0f);
  std::vector<int32_t> direct_ids(count), on_ids(count);
  std::vector<float> direct_weights(count), on_weights(count);
  backend_->route(config, small, tokens, nullptr, direct_ids, direct_weights);
  route_on(*backend_, config, small, tokens, nullptr, on_ids, on_weights);
  EXPECT_EQ(direct_ids, on_ids);
  EXPECT_EQ(direct_weights, on_weights);
}

// Backend draws against the float64 reference sampler (tests/support/reference_routing.h) on
// the same rows and uniforms: greedy with ties, temperature alone, top-k with tied weights at the cut, top-p,
// both, and -inf-masked tokens; a row's draw never depends on the rows beside it.
TEST_P(Conformance, SampleRowsDrawWhatTheFloat64ReferenceDraws) {
  const int64_t vocab = 300;
  std::vector<float> logits;
  std::vector<Backend::RowSampling> rows;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<Backend::RowSampling> settings = {
      {0.0f, 0, 1.0f, 0.0}, {1.0f, 0, 1.0f, 0.0}, {0.7f, 5, 1.0f, 0.0},  {1.3f, 0, 0.8f, 0.0},
      {0.9f, 7, 0.6f, 0.0}, {2.0f, 1, 1.0f, 0.0}, {1.0f, 40, 0.95f, 0.0}, {0.5f, 0, 0.3f, 0.0}};
  for (int r = 0; r < 24; ++r) {
    std::vector<float> row = random_floats(vocab, 2.0f);
    for (int64_t i = 0; i < vocab; i += 7) row[static_cast<size_t>(i)] = std::round(row[static_cast<size_t>(i)]);  // ties
    if (r % 5 == 0) row[static_cast<size_t>(r % vocab)] = -std::numeric_limits<float>::infinity();
    logits.insert(logits.end(), row.begin(), row.end());
    Backend::RowSampling setting = settings[static_cast<size_t>(r) % settings.size()];
    setting.uniform = uniform(rng_);
    rows.push_back(setting);
  }
  std::vector<int32_t> drawn(rows.size(), -1);
  backend_->sample_rows(logits, vocab, rows, drawn.data());
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::vector<float> row(logits.begin() + static_cast<int64_t>(r) * vocab,
                                 logits.begin() + static_cast<int64_t>(r + 1) * vocab);
    const int32_t expected =
        testing::reference_sample(row, rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].uniform);
    EXPECT_EQ(drawn[r], expected) << "row " << r;
  }
  // One row alone draws the same as inside the batch.
  int32_t alone = -1;
  backend_->sample_rows(host_ptr(logits.data() + 3 * vocab), vocab, std::span(rows).subspan(3, 1), &alone);
  EXPECT_EQ(alone, drawn[3]);
}

}  // namespace
}  // namespace moert::backend::conformance
