// Statistical tests of the rejection sampler: the emitted tokens follow the target p at
// every position, the mean tokens per pass follows (1 - alpha^(K+1)) / (1 - alpha), and
// deliberately wrong samplers fail the same checks (so the checks have power).
//
// Every test is deterministic: p and q come from a seeded mt19937_64, the passes' uniforms
// from spec_uniform with a fixed seed. Significance 1e-3 per chi-square check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/speculative/adaptive_depth.h"
#include "runtime/speculative/rejection_sampler.h"
#include "spec_test_support.h"

namespace moert::spec {
namespace {

using testing::chi_square_p_value;
using testing::l1_distance;
using testing::min_expected_count;
using testing::PassHistograms;
using testing::PassSampler;
using testing::random_distribution;
using testing::random_rows;
using testing::row;
using testing::run_passes;
using testing::SpecProblem;

constexpr double kSignificance = 1e-3;
constexpr int64_t kNumPasses = 100000;

SpecProblem random_problem(int vocab, int num_draft, uint64_t seed) {
  std::mt19937_64 rng(seed);
  SpecProblem problem;
  problem.vocab = vocab;
  problem.num_draft = num_draft;
  problem.target_probs = random_rows(num_draft + 1, vocab, rng);
  problem.draft_probs = random_rows(num_draft, vocab, rng);
  return problem;
}

// Smallest chi-square p-value over positions 0..K of p_j against the tokens emitted at j.
double min_p_value_over_positions(const SpecProblem& problem, const PassHistograms& hist) {
  double smallest = 1.0;
  for (int j = 0; j <= problem.num_draft; ++j) {
    smallest = std::min(smallest, chi_square_p_value(hist.counts_at[static_cast<size_t>(j)],
                                                     row(problem.target_probs, j, problem.vocab)));
  }
  return smallest;
}

// ---- A reimplementation with switchable mistakes (negative controls) ----------------------

struct Mistakes {
  bool always_accept = false;          // emits the drafts unchecked: output follows q
  bool resample_from_target = false;   // on rejection draws from p, not max(0, p - q)
  bool swapped_ratio = false;          // accepts w.p. min(1, q/p) (Chen's notation misread)
  bool bonus_from_last_draft_row = false;  // bonus from p_{K-1} instead of p_K
};

SpecVerifyResult mistaken_sample(const SpecVerifyInput& in, const SpecUniforms& u, std::vector<double>* scratch,
                                 const Mistakes& mistakes) {
  const int vocab = in.vocab_size;
  const int num_draft = in.num_draft();
  const auto p_row = [&](int i) { return in.target_probs.data() + static_cast<size_t>(i) * vocab; };
  SpecVerifyResult result;
  for (int i = 0; i < num_draft; ++i) {
    const int32_t x = in.draft_tokens[static_cast<size_t>(i)];
    const double* p = p_row(i);
    // q_i as a full row; one-hot at x when the proposer gave no probabilities.
    std::vector<double> q(static_cast<size_t>(vocab), 0.0);
    if (in.draft_probs.empty()) {
      q[static_cast<size_t>(x)] = 1.0;
    } else {
      const double* q_row = in.draft_probs.data() + static_cast<size_t>(i) * vocab;
      q.assign(q_row, q_row + vocab);
    }
    const double ux = u.accept[static_cast<size_t>(i)];
    const bool accept = mistakes.always_accept ||
                        (mistakes.swapped_ratio ? ux * p[x] < q[static_cast<size_t>(x)] : ux * q[static_cast<size_t>(x)] < p[x]);
    if (accept) {
      result.tokens.push_back(x);
      ++result.num_accepted;
      continue;
    }
    scratch->assign(static_cast<size_t>(vocab), 0.0);
    for (int v = 0; v < vocab; ++v) {
      (*scratch)[static_cast<size_t>(v)] =
          mistakes.resample_from_target ? p[v] : std::max(0.0, p[v] - q[static_cast<size_t>(v)]);
    }
    result.tokens.push_back(sampling::sample_from_distribution(*scratch, u.resample[static_cast<size_t>(i)]));
    return result;
  }
  const double* p = p_row(mistakes.bonus_from_last_draft_row && num_draft > 0 ? num_draft - 1 : num_draft);
  scratch->assign(p, p + vocab);
  result.tokens.push_back(sampling::sample_from_distribution(*scratch, u.resample[static_cast<size_t>(num_draft)]));
  result.is_bonus = true;
  return result;
}

PassSampler with_mistakes(Mistakes mistakes) {
  return [mistakes](const SpecVerifyInput& in, const SpecUniforms& u, std::vector<double>* scratch) {
    return mistaken_sample(in, u, scratch, mistakes);
  };
}

// ---- Every position follows p -------------------------------------------------------------

struct ShapeCase {
  int vocab;
  int num_draft;
};

class EmittedTokensFollowTarget : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(EmittedTokensFollowTarget, ChiSquareAtEveryPositionDoesNotReject) {
  const ShapeCase shape = GetParam();
  const SpecProblem problem = random_problem(shape.vocab, shape.num_draft, 1000 + 10 * shape.vocab + shape.num_draft);
  const PassHistograms hist = run_passes(problem, kNumPasses, /*seed=*/42);
  for (int j = 0; j <= shape.num_draft; ++j) {
    const std::vector<double> p = row(problem.target_probs, j, shape.vocab);
    const std::vector<int64_t>& counts = hist.counts_at[static_cast<size_t>(j)];
    int64_t reached = 0;
    for (int a : hist.num_accepted) reached += a >= j ? 1 : 0;
    int64_t emitted = 0;
    for (int64_t c : counts) emitted += c;
    EXPECT_EQ(emitted, reached) << "position " << j << ": one token per pass that reached it";
    ASSERT_GE(min_expected_count(p, emitted), 5.0) << "position " << j << ": too few samples for chi-square";
    EXPECT_GT(chi_square_p_value(counts, p), kSignificance) << "position " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmittedTokensFollowTarget,
                         ::testing::Values(ShapeCase{8, 1}, ShapeCase{8, 2}, ShapeCase{8, 3}, ShapeCase{16, 1},
                                           ShapeCase{16, 2}, ShapeCase{16, 3}, ShapeCase{32, 1}, ShapeCase{32, 2},
                                           ShapeCase{32, 3}),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << "V" << info.param.vocab << "_K" << info.param.num_draft;
                           return name.str();
                         });

// The histogram's distance to p shrinks like 1/sqrt(N); its distance to unrelated
// distributions does not (vLLM's test_rejection_sampling_approximates_target_distribution,
// with L1 distance). Returns {shrink of distance to p, mean shrink of distance to references}
// from N = 10 to N = 1e5.
std::pair<double, double> distance_shrink(const SpecProblem& problem, const PassSampler& sampler) {
  const std::vector<double> p0 = row(problem.target_probs, 0, problem.vocab);
  std::mt19937_64 rng(7);
  std::vector<std::vector<double>> references;
  for (int r = 0; r < 100; ++r) references.push_back(random_distribution(problem.vocab, rng));
  std::vector<double> to_target;
  std::vector<double> to_references;
  const auto measure = [&](int64_t, const PassHistograms& hist) {
    to_target.push_back(l1_distance(hist.counts_at[0], p0));
    double total = 0.0;
    for (const auto& ref : references) total += l1_distance(hist.counts_at[0], ref);
    to_references.push_back(total / static_cast<double>(references.size()));
  };
  run_passes(problem, kNumPasses, /*seed=*/3, sampler, {10, 100, 1000, 10000, 100000}, measure);
  EXPECT_EQ(to_target.size(), 5u);
  return {to_target.front() / to_target.back(), to_references.front() / to_references.back()};
}

TEST(RejectionSampleStatistics, DistanceToTargetShrinksFarFasterThanToReferences) {
  const SpecProblem problem = random_problem(/*vocab=*/10, /*num_draft=*/2, /*seed=*/11);
  const auto [target_shrink, reference_shrink] = distance_shrink(problem, testing::real_sampler);
  EXPECT_GT(target_shrink, 20.0 * reference_shrink)
      << "target shrink " << target_shrink << ", reference shrink " << reference_shrink;
}

// Drafts and target both processed from logits by temperature / top-k / top-p: the output
// stays inside the target's support and follows it.
TEST(RejectionSampleStatistics, ProcessedSparseDistributionsAreFollowed) {
  constexpr int kVocab = 32;
  constexpr int kNumDraft = 2;
  sampling::SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 8;
  params.top_p = 0.9f;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> target_logits((kNumDraft + 1) * kVocab);
  for (float& l : target_logits) l = normal(rng);
  std::vector<float> draft_logits(kNumDraft * kVocab);
  for (size_t i = 0; i < draft_logits.size(); ++i) draft_logits[i] = target_logits[i] + 0.7f * normal(rng);

  SpecProblem problem;
  problem.vocab = kVocab;
  problem.num_draft = kNumDraft;
  processed_distributions(target_logits.data(), kNumDraft + 1, kVocab, params, &problem.target_probs);
  processed_distributions(draft_logits.data(), kNumDraft, kVocab, params, &problem.draft_probs);

  const PassHistograms hist = run_passes(problem, kNumPasses, /*seed=*/9);
  for (int j = 0; j <= kNumDraft; ++j) {
    const std::vector<double> p = row(problem.target_probs, j, kVocab);
    const std::vector<int64_t>& counts = hist.counts_at[static_cast<size_t>(j)];
    int64_t emitted = 0;
    for (int v = 0; v < kVocab; ++v) {
      emitted += counts[static_cast<size_t>(v)];
      if (p[static_cast<size_t>(v)] == 0.0) {
        EXPECT_EQ(counts[static_cast<size_t>(v)], 0) << "token " << v << " outside p's support";
      }
    }
    ASSERT_GE(min_expected_count(p, emitted), 5.0) << "position " << j;
    EXPECT_GT(chi_square_p_value(counts, p), kSignificance) << "position " << j;
  }
}

// A proposer without probabilities (n-gram): q is one-hot at the fixed draft token.
TEST(RejectionSampleStatistics, OneHotDraftsFollowTarget) {
  constexpr int kVocab = 12;
  std::mt19937_64 rng(21);
  SpecProblem problem;
  problem.vocab = kVocab;
  problem.num_draft = 3;
  problem.target_probs = random_rows(4, kVocab, rng);
  problem.fixed_drafts = {3, 0, 11};  // arbitrary tokens, likely and unlikely alike
  const PassHistograms hist = run_passes(problem, kNumPasses, /*seed=*/13);
  EXPECT_GT(min_p_value_over_positions(problem, hist), kSignificance);
}

// ---- Negative controls: each mistake is caught ----------------------------------------------

TEST(RejectionSampleNegativeControls, ReimplementationWithoutMistakesPasses) {
  const SpecProblem problem = random_problem(16, 2, 77);
  const PassHistograms hist = run_passes(problem, kNumPasses, 42, with_mistakes({}));
  EXPECT_GT(min_p_value_over_positions(problem, hist), kSignificance);
}

TEST(RejectionSampleNegativeControls, EachMistakeFailsChiSquare) {
  const SpecProblem problem = random_problem(16, 2, 77);
  const std::vector<std::pair<std::string, Mistakes>> mistakes = {
      {"always_accept", {.always_accept = true}},
      {"resample_from_target", {.resample_from_target = true}},
      {"swapped_ratio", {.swapped_ratio = true}},
      {"bonus_from_last_draft_row", {.bonus_from_last_draft_row = true}},
  };
  for (const auto& [name, mistake] : mistakes) {
    const PassHistograms hist = run_passes(problem, kNumPasses, 42, with_mistakes(mistake));
    EXPECT_LT(min_p_value_over_positions(problem, hist), kSignificance) << name;
  }
}

TEST(RejectionSampleNegativeControls, AlwaysAcceptFailsDistanceShrink) {
  const SpecProblem problem = random_problem(10, 2, 11);
  const auto [target_shrink, reference_shrink] = distance_shrink(problem, with_mistakes({.always_accept = true}));
  EXPECT_LT(target_shrink, 20.0 * reference_shrink)
      << "target shrink " << target_shrink << ", reference shrink " << reference_shrink;
}

// ---- Tokens per pass at a known acceptance rate ----------------------------------------------

// Problem whose every draft position has acceptance rate exactly alpha = sum_x min(p_i, q_i):
//   mixture:  q_i random on tokens [0, V/2), r_i random on [V/2, V), p_i = alpha q_i + (1 - alpha) r_i,
//             so min(p_i, q_i) = alpha q_i on [0, V/2) and 0 elsewhere;
//   one-hot:  q_i one-hot at d_i, p_i(d_i) = alpha, the rest of p_i spread at random.
// The bonus row p_K is random.
SpecProblem known_alpha_problem(double alpha, int num_draft, bool one_hot, uint64_t seed) {
  constexpr int kVocab = 16;
  constexpr int kHalf = kVocab / 2;
  std::mt19937_64 rng(seed);
  SpecProblem problem;
  problem.vocab = kVocab;
  problem.num_draft = num_draft;
  for (int i = 0; i < num_draft; ++i) {
    std::vector<double> p(kVocab, 0.0);
    if (one_hot) {
      const int32_t draft = static_cast<int32_t>(rng() % kVocab);
      const std::vector<double> rest = random_distribution(kVocab - 1, rng);
      for (int v = 0, k = 0; v < kVocab; ++v) p[v] = v == draft ? alpha : (1.0 - alpha) * rest[static_cast<size_t>(k++)];
      problem.fixed_drafts.push_back(draft);
    } else {
      const std::vector<double> q_half = random_distribution(kHalf, rng);
      const std::vector<double> r_half = random_distribution(kHalf, rng);
      std::vector<double> q(kVocab, 0.0);
      for (int v = 0; v < kHalf; ++v) {
        q[v] = q_half[static_cast<size_t>(v)];
        p[v] = alpha * q_half[static_cast<size_t>(v)];
        p[kHalf + v] = (1.0 - alpha) * r_half[static_cast<size_t>(v)];
      }
      double overlap = 0.0;
      for (int v = 0; v < kVocab; ++v) overlap += std::min(p[v], q[v]);
      EXPECT_NEAR(overlap, alpha, 1e-12) << "construction";
      problem.draft_probs.insert(problem.draft_probs.end(), q.begin(), q.end());
    }
    problem.target_probs.insert(problem.target_probs.end(), p.begin(), p.end());
  }
  const std::vector<double> bonus = random_distribution(kVocab, rng);
  problem.target_probs.insert(problem.target_probs.end(), bonus.begin(), bonus.end());
  return problem;
}

struct AlphaCase {
  double alpha;
  int num_draft;
  bool one_hot;
};

class TokensPerPass : public ::testing::TestWithParam<AlphaCase> {};

TEST_P(TokensPerPass, MatchesGeometricExpectation) {
  const AlphaCase c = GetParam();
  constexpr int64_t kPasses = 20000;
  const SpecProblem problem = known_alpha_problem(c.alpha, c.num_draft, c.one_hot, 31 + c.num_draft);
  const PassHistograms hist = run_passes(problem, kPasses, /*seed=*/17);
  AcceptanceStats stats;
  AcceptanceRateEstimator estimator(/*decay=*/1.0);
  for (int a : hist.num_accepted) {
    stats.record(c.num_draft, a);
    estimator.observe(c.num_draft, a);
  }
  const double expected = (1.0 - std::pow(c.alpha, c.num_draft + 1)) / (1.0 - c.alpha);
  EXPECT_NEAR(expected_tokens_per_pass(c.alpha, c.num_draft), expected, 1e-12);
  EXPECT_NEAR(stats.mean_tokens_per_pass(), expected, 0.05 * expected);
  EXPECT_NEAR(estimator.alpha(), c.alpha, 0.02);
  for (int i = 0; i < c.num_draft; ++i) {
    if (stats.tested_at(i) < 2000) continue;  // too few trials for a 0.05 band
    EXPECT_NEAR(stats.conditional_acceptance_at(i), c.alpha, 0.05) << "position " << i;
  }

  // The same measurement catches a sampler that accepts everything (K + 1 per pass).
  const PassHistograms wrong = run_passes(problem, kPasses, 17, with_mistakes({.always_accept = true}));
  AcceptanceStats wrong_stats;
  for (int a : wrong.num_accepted) wrong_stats.record(c.num_draft, a);
  EXPECT_GT(std::abs(wrong_stats.mean_tokens_per_pass() - expected), 0.05 * expected);
}

INSTANTIATE_TEST_SUITE_P(
    KnownAlpha, TokensPerPass,
    ::testing::Values(AlphaCase{0.5, 2, false}, AlphaCase{0.5, 4, false}, AlphaCase{0.5, 8, false},
                      AlphaCase{0.8, 2, false}, AlphaCase{0.8, 4, false}, AlphaCase{0.8, 8, false},
                      AlphaCase{0.5, 2, true}, AlphaCase{0.8, 4, true}, AlphaCase{0.8, 8, true}),
    [](const auto& info) {
      std::ostringstream name;
      name << "alpha" << static_cast<int>(info.param.alpha * 10) << "_K" << info.param.num_draft
           << (info.param.one_hot ? "_one_hot" : "_mixture");
      return name.str();
    });

}  // namespace
}  // namespace moert::spec
