#include "runtime/sampling/sampler.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"
#include "tests/support/reference_routing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace moert::sampling {
namespace {

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

std::vector<double> distribution(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<double> probs;
  sampling_distribution(logits.data(), static_cast<int>(logits.size()), p, &probs);
  return probs;
}

std::set<int32_t> support(const std::vector<double>& probs) {
  std::set<int32_t> ids;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0) ids.insert(static_cast<int32_t>(i));
  }
  return ids;
}

// float64 references (tests/support/reference_routing.h), shared with the backend harness.
using testing::reference_distribution;
using testing::reference_sample;
using testing::reference_support;

void expect_probs_near(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-14) << "token " << i;
}

TEST(Greedy, ArgmaxWithLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 5.0f, 2.0f, 5.0f};
  const SamplingParams p = params(0.0f, /*top_k=*/1, /*top_p=*/0.1f);  // filters ignored
  ASSERT_TRUE(p.is_greedy());
  EXPECT_EQ(distribution(logits, p), (std::vector<double>{0, 1, 0, 0, 0}));
  for (double u : {0.0, 0.5, std::nextafter(1.0, 0.0)}) {
    EXPECT_EQ(sample_token(logits.data(), 5, p, u, nullptr), 1);
  }
  const std::vector<float> masked = {-INFINITY, -3.0f, -INFINITY};
  EXPECT_EQ(sample_token(masked.data(), 3, p, 0.0, nullptr), 1);
}

TEST(Temperature, MatchesFloat64HandComputation) {
  const std::vector<float> logits = {1.0f, -0.5f, 2.25f, 0.0f, -INFINITY};
  for (float temperature : {0.6f, 1.0f, 1.7f}) {
    const std::vector<double> probs = distribution(logits, params(temperature));
    // Hand-written: exp((l - 2.25) / t) / sum, with t the float temperature widened.
    const double t = temperature;
    const double w[4] = {std::exp(-1.25 / t), std::exp(-2.75 / t), 1.0, std::exp(-2.25 / t)};
    const double total = w[0] + w[1] + w[2] + w[3];
    expect_probs_near(probs, {w[0] / total, w[1] / total, w[2] / total, w[3] / total, 0.0});
  }
  // Very high temperature tends to uniform over the finite logits.
  const std::vector<double> flat = distribution(logits, params(1e6f));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(flat[i], 0.25, 1e-5);
  EXPECT_EQ(flat[4], 0.0);
}

TEST(TopK, KeepsExactlyKWithLowerIdsOnTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(support(distribution(logits, params(1.0f, 1))), (std::set<int32_t>{1}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 2))), (std::set<int32_t>{1, 2}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 3))), (std::set<int32_t>{1, 2, 4}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 4))), (std::set<int32_t>{1, 2, 3, 4}));
  expect_probs_near(distribution(logits, params(1.0f, 2)), {0, 0.5, 0.5, 0, 0});
  expect_probs_near(distribution(logits, params(0.8f, 4)), reference_distribution(logits, 0.8f, {1, 2, 3, 4}));
  // k >= V and k = 0 keep everything.
  const std::set<int32_t> all = {0, 1, 2, 3, 4};
  EXPECT_EQ(support(distribution(logits, params(1.0f, 5))), all);
  EXPECT_EQ(support(distribution(logits, params(1.0f, 100))), all);
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0))), all);
}

TEST(TopP, SmallestNucleusInProbabilityOrder) {
  // Weights e^-2, 1, e^-1, 1: order 1, 3 (tie: lower id first), 2, 0;
  // cumulative masses 0.3995, 0.7990, 0.9459, 1.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  const double total = 2.0 + std::exp(-1.0) + std::exp(-2.0);
  ASSERT_NEAR(1.0 / total, 0.3995, 1e-4);
  ASSERT_NEAR(2.0 / total, 0.7990, 1e-4);
  ASSERT_NEAR((2.0 + std::exp(-1.0)) / total, 0.9459, 1e-4);
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 1e-6f))), (std::set<int32_t>{1}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.39f))), (std::set<int32_t>{1}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.40f))), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.79f))), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.80f))), (std::set<int32_t>{1, 2, 3}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.94f))), (std::set<int32_t>{1, 2, 3}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.95f))), (std::set<int32_t>{0, 1, 2, 3}));
  expect_probs_near(distribution(logits, params(1.0f, 0, 0.9f)), reference_distribution(logits, 1.0, {1, 2, 3}));
  expect_probs_near(distribution(logits, params(1.0f, 0, 0.5f)), {0, 0.5, 0, 0.5});
}

TEST(TopP, CumulativeExactlyEqualToTopPStops) {
  // Four equal tokens: masses 0.25, 0.5, 0.75, 1 are exact.
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.25f))), (std::set<int32_t>{0}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.5f))), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.75f))), (std::set<int32_t>{0, 1, 2}));
  // One float step above the boundary needs one more token.
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, std::nextafter(0.5f, 1.0f)))),
            (std::set<int32_t>{0, 1, 2}));
  expect_probs_near(distribution(logits, params(1.0f, 0, 0.5f)), {0.5, 0.5, 0, 0});
}

TEST(TopKThenTopP, TopPMassIsOfTheTopKDistribution) {
  // Top-k 3 keeps {1, 3, 5} with weights 1, e^-0.5, e^-1: masses 0.5065, 0.8137, 1.
  // Top-p 0.8 on that gives {1, 3}; applying top-p first (on all six) would give {1, 3, 5}.
  const std::vector<float> logits = {0.5f, 3.0f, 1.0f, 2.5f, -1.0f, 2.0f};
  EXPECT_EQ(support(distribution(logits, params(1.0f, 3))), (std::set<int32_t>{1, 3, 5}));
  EXPECT_EQ(support(distribution(logits, params(1.0f, 0, 0.8f))), (std::set<int32_t>{1, 3, 5}));
  const SamplingParams p = params(1.0f, 3, 0.8f);
  EXPECT_EQ(support(distribution(logits, p)), (std::set<int32_t>{1, 3}));
  expect_probs_near(distribution(logits, p), reference_distribution(logits, 1.0, {1, 3}));
  // Exact boundary after top-k: 4 equal kept tokens, top_p 0.75 -> 3 of them.
  const std::vector<float> plateau = {3, 3, 3, 3, 1, 1, 1, 1};
  EXPECT_EQ(support(distribution(plateau, params(1.0f, 4, 0.75f))), (std::set<int32_t>{0, 1, 2}));
}

TEST(Draws, MatchTheFloat64ReferenceDraw) {
  // The inverse-CDF draw after every filter, against the reference on one row with ties and a
  // masked token, for a sweep of uniforms (including 0 and the largest below 1).
  std::vector<float> logits(257);
  uint64_t state = 7;
  for (float& l : logits) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    l = static_cast<float>(static_cast<int>((state >> 33) % 48) - 30) / 4.0f;
  }
  logits[3] = -INFINITY;
  std::vector<double> scratch;
  for (const SamplingParams& p : {params(0.0f), params(1.0f), params(0.7f, 5), params(1.3f, 0, 0.8f),
                                  params(0.9f, 7, 0.6f), params(2.0f, 1), params(0.5f, 0, 0.3f)}) {
    for (int i = 0; i <= 64; ++i) {
      const double u = i == 64 ? std::nextafter(1.0, 0.0) : (i + 0.37) / 64.0;
      EXPECT_EQ(sample_token(logits.data(), static_cast<int>(logits.size()), p, u, &scratch),
                reference_sample(logits, p.temperature, p.top_k, p.top_p, u))
          << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " u " << u;
    }
  }
}

TEST(Filters, MatchFullSortReferenceOnLargeVocabWithTies) {
  // V = 4096 logits quantised to 1/8 so many ties occur; a deterministic LCG fills them.
  std::vector<float> logits(4096);
  uint64_t state = 42;
  for (float& l : logits) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    l = static_cast<float>(static_cast<int>((state >> 33) % 64) - 40) / 8.0f;
  }
  for (int top_k : {0, 1, 7, 50, 1000}) {
    for (float top_p : {1.0f, 0.95f, 0.5f, 0.1f}) {
      const SamplingParams p = params(0.9f, top_k, top_p);
      const std::set<int32_t> expected = reference_support(logits, 0.9f, top_k, top_p);
      const std::vector<double> probs = distribution(logits, p);
      EXPECT_EQ(support(probs), expected) << "top_k " << top_k << " top_p " << top_p;
      expect_probs_near(probs, reference_distribution(logits, 0.9f, expected));
    }
  }
}

TEST(Validate, NamesTheOffendingValue) {
  EXPECT_TRUE(validate_sampling_params(SamplingParams{}).is_ok());
  EXPECT_TRUE(validate_sampling_params(params(1.0f, 5, 0.9f)).is_ok());
  const auto message = [](SamplingParams p) {
    const Status status = validate_sampling_params(p);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    return status.message();
  };
  EXPECT_EQ(message(params(-1.0f)), "temperature = -1 must be finite and >= 0");
  EXPECT_EQ(message(params(NAN)), "temperature = nan must be finite and >= 0");
  EXPECT_EQ(message(params(INFINITY)), "temperature = inf must be finite and >= 0");
  EXPECT_EQ(message(params(1.0f, -2)), "top_k = -2 must be >= 0 (0 = off)");
  EXPECT_EQ(message(params(1.0f, 0, 1.5f)), "top_p = 1.5 must be in (0, 1]");
  EXPECT_EQ(message(params(1.0f, 0, 0.0f)), "top_p = 0 must be in (0, 1]");
  EXPECT_EQ(message(params(1.0f, 0, NAN)), "top_p = nan must be in (0, 1]");
  SamplingParams p;
  p.n = 0;
  EXPECT_EQ(message(p), "n = 0 must be >= 1");
  p = SamplingParams{};
  p.max_tokens = 0;
  EXPECT_EQ(message(p), "max_tokens = 0 must be >= 1");
}

TEST(SampleToken, ExtremeUniformsStayInTheSupport) {
  const double almost_one = std::nextafter(1.0, 0.0);
  // Top-k 2 keeps {1, 3}, each 0.5; ids 0, 2, 4 have probability 0.
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 5.0f, 0.0f};
  const SamplingParams p = params(1.0f, 2);
  std::vector<double> scratch;
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.0, &scratch), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, p, std::nextafter(0.5, 0.0), &scratch), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.5, &scratch), 3);
  EXPECT_EQ(sample_token(logits.data(), 5, p, almost_one, &scratch), 3);
  // Weights that do not sum to exactly 1, zeros at both ends.
  EXPECT_EQ(sample_from_distribution({0, 0, 0.3, 0, 0.7, 0}, 0.0), 2);
  EXPECT_EQ(sample_from_distribution({0, 0, 0.3, 0, 0.7, 0}, almost_one), 4);
  EXPECT_EQ(sample_from_distribution({0.1, 0.2, 0.3, 0.4, 0}, almost_one), 3);
  EXPECT_EQ(sample_from_distribution({0.1, 0.2, 0.3, 0.4, 0}, 0.0), 0);
  EXPECT_EQ(sample_from_distribution({2.0, 6.0}, 0.24), 0);
  EXPECT_EQ(sample_from_distribution({2.0, 6.0}, 0.25), 1);
  // A top-p nucleus over a tail of tiny probabilities: many draws, all in the support.
  std::vector<float> tail(1000, -30.0f);
  tail[10] = 2.0f;
  tail[500] = 1.5f;
  tail[999] = 1.0f;
  const SamplingParams nucleus = params(1.0f, 0, 0.9f);
  const std::set<int32_t> kept = support(distribution(tail, nucleus));
  EXPECT_EQ(kept, (std::set<int32_t>{10, 500, 999}));
  for (uint64_t i = 0; i < 2000; ++i) {
    const double u = i < 2 ? (i == 0 ? 0.0 : almost_one) : counter_uniform(7, 0, i);
    EXPECT_TRUE(kept.count(sample_token(tail.data(), 1000, nucleus, u, &scratch)));
  }
}

TEST(SampleTokenDeathTest, RejectsUniformOutsideUnitInterval) {
  MOERT_EXPECT_DEATH(sample_from_distribution({0.5, 0.5}, 1.0), "uniform = 1 must be in");
  MOERT_EXPECT_DEATH(sample_from_distribution({0.0, 0.0}, 0.5), "probabilities are 0");
}

TEST(CounterUniform, DeterministicInRangeAndIndependent) {
  EXPECT_EQ(counter_uniform(1, 2, 3), counter_uniform(1, 2, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(2, 2, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(1, 3, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(1, 2, 4));
  EXPECT_NE(counter_uniform(0, 0, 1), counter_uniform(0, 1, 0));  // arguments are not symmetric

  std::set<double> grid;
  for (uint64_t s = 0; s < 64; ++s) {
    for (uint64_t c = 0; c < 64; ++c) grid.insert(counter_uniform(uint64_t(-1), s, c));
  }
  EXPECT_EQ(grid.size(), 64u * 64u);

  constexpr int kDraws = 100000;
  std::vector<double> a(kDraws), b(kDraws);
  int bins[10] = {};
  double sum = 0.0;
  for (int i = 0; i < kDraws; ++i) {
    a[i] = counter_uniform(12345, 0, i);
    b[i] = counter_uniform(12345, 1, i);
    ASSERT_GE(a[i], 0.0);
    ASSERT_LT(a[i], 1.0);
    ASSERT_GE(b[i], 0.0);
    ASSERT_LT(b[i], 1.0);
    sum += a[i];
    ++bins[static_cast<int>(a[i] * 10)];
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 5 * 0.2887 / std::sqrt(kDraws));
  double chi2 = 0.0;
  for (int count : bins) chi2 += (count - kDraws / 10.0) * (count - kDraws / 10.0) / (kDraws / 10.0);
  EXPECT_LT(chi2, 27.877);  // chi-square, 9 dof, p = 0.001

  // Pearson correlation between streams and at lag 1 within a stream.
  const auto correlation = [](const double* x, const double* y, int n) {
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    for (int i = 0; i < n; ++i) {
      sx += x[i], sy += y[i], sxx += x[i] * x[i], syy += y[i] * y[i], sxy += x[i] * y[i];
    }
    const double cov = sxy / n - sx / n * sy / n;
    return cov / std::sqrt((sxx / n - sx / n * sx / n) * (syy / n - sy / n * sy / n));
  };
  const double bound = 5.0 / std::sqrt(kDraws);
  EXPECT_LT(std::abs(correlation(a.data(), b.data(), kDraws)), bound);
  EXPECT_LT(std::abs(correlation(a.data(), a.data() + 1, kDraws - 1)), bound);
}

TEST(SampleToken, ChiSquareAgainstTheFilteredDistribution) {
  // Fixed arbitrary logits over V = 10; temperature 0.7 and top_k 6 keep {5, 2, 7, 3, 0, 8}.
  const std::vector<float> logits = {0.3f, -1.2f, 1.5f, 0.8f, -0.4f, 2.1f, -2.0f, 1.1f, 0.0f, -0.9f};
  const SamplingParams p = params(0.7f, 6);
  const std::set<int32_t> kept = {0, 2, 3, 5, 7, 8};
  const std::vector<double> expected = reference_distribution(logits, 0.7f, kept);
  ASSERT_EQ(support(distribution(logits, p)), kept);

  constexpr int kDraws = 100000;
  std::vector<int> counts(10, 0);
  std::vector<double> scratch;
  for (int i = 0; i < kDraws; ++i) {
    ++counts[sample_token(logits.data(), 10, p, counter_uniform(2024, 0, i), &scratch)];
  }
  double chi2 = 0.0;
  for (int32_t id = 0; id < 10; ++id) {
    if (!kept.count(id)) {
      EXPECT_EQ(counts[id], 0) << "token " << id << " is outside the top-k";
      continue;
    }
    const double e = expected[id] * kDraws;
    ASSERT_GT(e, 5.0);
    chi2 += (counts[id] - e) * (counts[id] - e) / e;
  }
  EXPECT_LT(chi2, 20.515);  // chi-square, 6 - 1 = 5 dof, p = 0.001
}

TEST(FinishReason, StopTokenBeforeLength) {
  SamplingParams p;
  p.max_tokens = 4;
  p.stop_token_ids = {7, 9};
  EXPECT_EQ(finish_reason(p, 3, 1), std::nullopt);
  EXPECT_EQ(finish_reason(p, 3, 3), std::nullopt);
  EXPECT_EQ(finish_reason(p, 9, 1), "stop");
  EXPECT_EQ(finish_reason(p, 7, 4), "stop");
  EXPECT_EQ(finish_reason(p, 3, 4), "length");
  EXPECT_EQ(finish_reason(p, 3, 5), "length");
  p.stop_token_ids.clear();
  EXPECT_EQ(finish_reason(p, 9, 1), std::nullopt);
}

}  // namespace
}  // namespace moert::sampling
