// Exact tests of the rejection sampler: greedy outputs, hand-computed sampled passes,
// boundaries of the acceptance test, the one-hot (no draft probabilities) path, the
// degenerate residual, and the determinism of the uniforms.
#include "runtime/speculative/rejection_sampler.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "spec_test_support.h"

namespace moert::spec {
namespace {

using testing::random_rows;
using testing::row;

constexpr double kAlmostOne = 0x1.fffffffffffffp-1;  // largest double < 1

// Rows [argmaxes.size(), V]: 0.4 at the given argmax, the rest 0.6 spread evenly.
std::vector<double> rows_with_argmax(const std::vector<int32_t>& argmaxes, int vocab) {
  std::vector<double> rows;
  for (int32_t best : argmaxes) {
    for (int v = 0; v < vocab; ++v) rows.push_back(v == best ? 0.4 : 0.6 / (vocab - 1));
  }
  return rows;
}

SpecVerifyInput input_of(int vocab, const std::vector<int32_t>& drafts, const std::vector<double>& q,
                         const std::vector<double>& p) {
  return {vocab, drafts, q, p};
}

void expect_result(const SpecVerifyResult& r, const std::vector<int32_t>& tokens, int num_accepted, bool is_bonus) {
  EXPECT_EQ(r.tokens, tokens);
  EXPECT_EQ(r.num_accepted, num_accepted);
  EXPECT_EQ(r.is_bonus, is_bonus);
}

// ---- Greedy -----------------------------------------------------------------------------

TEST(RejectionSampleGreedy, AllAcceptedAppendsBonus) {
  const std::vector<double> p = rows_with_argmax({1, 2, 3, 4}, 6);
  expect_result(rejection_sample_greedy(input_of(6, {1, 2, 3}, {}, p)), {1, 2, 3, 4}, 3, true);
}

TEST(RejectionSampleGreedy, StopsAtFirstMismatchWithTargetArgmax) {
  const std::vector<double> p = rows_with_argmax({1, 5, 3, 4}, 6);
  // Position 2 would match again, but the pass has stopped.
  expect_result(rejection_sample_greedy(input_of(6, {1, 2, 3}, {}, p)), {1, 5}, 1, false);
  expect_result(rejection_sample_greedy(input_of(6, {0, 2, 3}, {}, p)), {1}, 0, false);
}

TEST(RejectionSampleGreedy, EmptyDraftGivesOnlyBonus) {
  expect_result(rejection_sample_greedy(input_of(6, {}, {}, rows_with_argmax({4}, 6))), {4}, 0, true);
}

TEST(RejectionSampleGreedy, TiesGoToLowestId) {
  const std::vector<double> p = {0.4, 0.4, 0.2, /*bonus*/ 0.1, 0.45, 0.45};
  expect_result(rejection_sample_greedy(input_of(3, {1}, {}, p)), {0}, 0, false);
  expect_result(rejection_sample_greedy(input_of(3, {0}, {}, p)), {0, 1}, 1, true);
}

TEST(RejectionSampleGreedy, IgnoresDraftProbabilitiesAndUniforms) {
  std::mt19937_64 rng(3);
  const std::vector<double> p = rows_with_argmax({2, 0, 1}, 4);
  const std::vector<double> q = random_rows(2, 4, rng);
  sampling::SamplingParams greedy;  // temperature 0
  const PassUniforms u = make_pass_uniforms(1, 0, 0, 2);
  std::vector<double> scratch;
  expect_result(verify_draft(input_of(4, {2, 0}, q, p), greedy, u.view(), &scratch), {2, 0, 1}, 2, true);
  expect_result(verify_draft(input_of(4, {2, 3}, q, p), greedy, u.view(), &scratch), {2, 0}, 1, false);
}

// Greedy verification of rows made by processed_distributions (one-hot at the logits'
// argmax) emits exactly what the greedy sample_token picks.
TEST(RejectionSampleGreedy, MatchesGreedySampleToken) {
  constexpr int kVocab = 7;
  const std::vector<float> logits = {0.f, 3.f, 3.f, 1.f, -2.f, 0.5f, 2.9f,   // argmax 1 (tie with 2)
                                     5.f, 1.f, 0.f, 0.f, 0.f, 0.f, 5.f,      // argmax 0 (tie with 6)
                                     0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.1f};   // argmax 6
  sampling::SamplingParams greedy;
  std::vector<double> p;
  processed_distributions(logits.data(), 3, kVocab, greedy, &p);
  std::vector<int32_t> expected;
  for (int r = 0; r < 3; ++r) expected.push_back(sampling::sample_token(logits.data() + r * kVocab, kVocab, greedy, 0.5, nullptr));
  ASSERT_EQ(expected, (std::vector<int32_t>{1, 0, 6}));
  expect_result(rejection_sample_greedy(input_of(kVocab, {1, 0}, {}, p)), {1, 0, 6}, 2, true);
  expect_result(rejection_sample_greedy(input_of(kVocab, {2, 0}, {}, p)), {1}, 0, false);
}

// ---- Sampled: hand-computed passes --------------------------------------------------------

// p_0 = [0.1, 0.2, 0.3, 0.4], q_0 = [0.4, 0.3, 0.2, 0.1], draft 0: accepted iff u * 0.4 < 0.1
// (u < 0.25). Residual max(0, p - q) = [0, 0, 0.1, 0.3]: inverse CDF at resample * 0.4.
TEST(RejectionSample, HandComputedAcceptAndRecover) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4, /*bonus*/ 0.0, 0.0, 1.0, 0.0};
  const std::vector<double> q = {0.4, 0.3, 0.2, 0.1};
  const std::vector<int32_t> drafts = {0};
  const SpecVerifyInput in = input_of(4, drafts, q, p);  // spans into the named vectors
  std::vector<double> scratch;
  const auto run = [&](double accept, double resample0, double resample1) {
    const std::vector<double> a = {accept};
    const std::vector<double> r = {resample0, resample1};
    return rejection_sample(in, {a, r}, &scratch);
  };
  expect_result(run(0.2, 0.9, 0.5), {0, 2}, 1, true);   // accepted, bonus from p_1 (one-hot at 2)
  expect_result(run(0.3, 0.2, 0.5), {2}, 0, false);     // rejected: 0.08 < 0.1 -> token 2
  expect_result(run(0.3, 0.5, 0.5), {3}, 0, false);     // rejected: 0.2 >= 0.1 -> token 3
  expect_result(run(0.3, 0.0, 0.5), {2}, 0, false);     // residual never gives tokens 0, 1
}

TEST(RejectionSample, StopsAtFirstRejection) {
  // Position 0 accepts certainly (p >= q), position 1 rejects certainly (p(x) = 0).
  const std::vector<double> p = {0.5, 0.5, 0.0,  0.0, 0.5, 0.5,  1.0, 0.0, 0.0};
  const std::vector<double> q = {0.5, 0.5, 0.0,  1.0, 0.0, 0.0};
  const std::vector<double> accept = {kAlmostOne, 0.0};
  const std::vector<double> resample = {0.0, 0.75, 0.0};
  std::vector<double> scratch;
  // Residual at position 1: [0, 0.5, 0.5]; 0.75 * 1.0 falls in token 2.
  expect_result(rejection_sample(input_of(3, {1, 0}, q, p), {accept, resample}, &scratch), {1, 2}, 1, false);
}

TEST(RejectionSample, AcceptanceBoundaries) {
  std::vector<double> scratch;
  const std::vector<double> resample = {0.0, 0.0};
  // p(x) >= q(x): accepted for every u < 1.
  {
    const std::vector<double> p = {0.6, 0.4, 1.0, 0.0};
    const std::vector<double> q = {0.6, 0.4};
    const std::vector<double> accept = {kAlmostOne};
    EXPECT_EQ(rejection_sample(input_of(2, {0}, q, p), {accept, resample}, &scratch).num_accepted, 1);
  }
  // p(x) == 0: never accepted, even at u == 0.
  {
    const std::vector<double> p = {0.0, 1.0, 1.0, 0.0};
    const std::vector<double> q = {0.5, 0.5};
    const std::vector<double> accept = {0.0};
    expect_result(rejection_sample(input_of(2, {0}, q, p), {accept, resample}, &scratch), {1}, 0, false);
  }
  // q(x) == 0 (the draft was not drawn from q): rejected rather than divided by zero.
  {
    const std::vector<double> p = {0.5, 0.5, 1.0, 0.0};
    const std::vector<double> q = {0.0, 1.0};
    const std::vector<double> accept = {0.0};
    expect_result(rejection_sample(input_of(2, {0}, q, p), {accept, resample}, &scratch), {0}, 0, false);
  }
}

// Bonus token (all accepted) equals the plain sampler's draw with the same uniform, for a
// p_K made from logits by processed_distributions.
TEST(RejectionSample, BonusTokenIsThePlainSamplersDraw) {
  constexpr int kVocab = 9;
  sampling::SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 5;
  params.top_p = 0.85f;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(2 * kVocab);
  for (float& l : logits) l = normal(rng);
  std::vector<double> p;
  processed_distributions(logits.data(), 2, kVocab, params, &p);
  const std::vector<double> p_draft = row(p, 0, kVocab);
  std::vector<double> scratch;
  std::vector<double> plain_scratch;
  for (uint64_t position = 0; position < 200; ++position) {
    // Draft = a token of p_0's support, q = p_0: always accepted.
    const int32_t draft = sampling::sample_from_distribution(p_draft, sampling::counter_uniform(1, 0, position));
    const PassUniforms u = make_pass_uniforms(/*seed=*/5, /*stream=*/2, position, 1);
    const SpecVerifyResult r = rejection_sample(input_of(kVocab, {draft}, p_draft, p), u.view(), &scratch);
    ASSERT_TRUE(r.is_bonus);
    const double plain_uniform = sampling::counter_uniform(5, 2, position + 1);
    EXPECT_EQ(r.tokens.back(), sampling::sample_token(logits.data() + kVocab, kVocab, params, plain_uniform, &plain_scratch));
  }
}

// A one-hot target (temperature 0 processing) makes the sampled path agree with greedy.
TEST(RejectionSample, OneHotTargetAgreesWithGreedy) {
  constexpr int kVocab = 5;
  constexpr int kNumDraft = 3;
  std::mt19937_64 rng(12);
  std::vector<double> scratch;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> argmaxes(kNumDraft + 1);
    for (int32_t& a : argmaxes) a = static_cast<int32_t>(rng() % kVocab);
    std::vector<double> p((kNumDraft + 1) * kVocab, 0.0);
    for (int i = 0; i <= kNumDraft; ++i) p[i * kVocab + argmaxes[static_cast<size_t>(i)]] = 1.0;
    const std::vector<double> q = random_rows(kNumDraft, kVocab, rng);
    std::vector<int32_t> drafts(kNumDraft);
    // Drafts equal the argmax with probability ~1/2 each, so passes stop at all depths.
    for (int i = 0; i < kNumDraft; ++i) drafts[i] = rng() % 2 ? argmaxes[static_cast<size_t>(i)] : static_cast<int32_t>(rng() % kVocab);
    const PassUniforms u = make_pass_uniforms(99, static_cast<uint64_t>(trial), 0, kNumDraft);
    const SpecVerifyResult sampled = rejection_sample(input_of(kVocab, drafts, q, p), u.view(), &scratch);
    const SpecVerifyResult greedy = rejection_sample_greedy(input_of(kVocab, drafts, q, p));
    ASSERT_EQ(sampled.tokens, greedy.tokens) << "trial " << trial;
  }
}

// ---- No draft probabilities (n-gram): one-hot q ---------------------------------------------

TEST(RejectionSampleOneHot, RecoveredTokenIsNeverTheRejectedDraft) {
  // q one-hot at 2: accepted iff u < p(2) = 0.5; residual = p with token 2 zeroed.
  const std::vector<double> p = {0.25, 0.25, 0.5, /*bonus*/ 1.0, 0.0, 0.0};
  std::vector<double> scratch;
  const std::vector<double> reject = {0.6};
  const std::vector<double> accept = {0.4};
  expect_result(rejection_sample(input_of(3, {2}, {}, p), {reject, std::vector<double>{kAlmostOne, 0.0}}, &scratch), {1}, 0, false);
  expect_result(rejection_sample(input_of(3, {2}, {}, p), {reject, std::vector<double>{0.0, 0.0}}, &scratch), {0}, 0, false);
  expect_result(rejection_sample(input_of(3, {2}, {}, p), {accept, std::vector<double>{0.0, 0.0}}, &scratch), {2, 0}, 1, true);
}

TEST(RejectionSampleOneHot, EmptyDraftProbsEqualExplicitOneHotRows) {
  constexpr int kVocab = 6;
  constexpr int kNumDraft = 3;
  std::mt19937_64 rng(4);
  std::vector<double> scratch;
  int num_rejections = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const std::vector<double> p = random_rows(kNumDraft + 1, kVocab, rng);
    std::vector<int32_t> drafts(kNumDraft);
    std::vector<double> one_hot(kNumDraft * kVocab, 0.0);
    for (int i = 0; i < kNumDraft; ++i) {
      drafts[i] = static_cast<int32_t>(rng() % kVocab);
      one_hot[i * kVocab + drafts[i]] = 1.0;
    }
    const PassUniforms u = make_pass_uniforms(3, static_cast<uint64_t>(trial), 10, kNumDraft);
    const SpecVerifyResult implicit = rejection_sample(input_of(kVocab, drafts, {}, p), u.view(), &scratch);
    const SpecVerifyResult explicit_rows = rejection_sample(input_of(kVocab, drafts, one_hot, p), u.view(), &scratch);
    ASSERT_EQ(implicit.tokens, explicit_rows.tokens) << "trial " << trial;
    num_rejections += implicit.is_bonus ? 0 : 1;
  }
  EXPECT_GT(num_rejections, 500);  // the recovered path was exercised
}

// ---- Degenerate residual ------------------------------------------------------------------

// p <= q everywhere leaves max(0, p - q) all zero (here p sums to 0.5, standing in for
// rounding): the recovered token is drawn from p, so it stays in p's support.
TEST(RejectionSample, AllZeroResidualFallsBackToTarget) {
  const std::vector<double> p = {0.2, 0.3, 0.0, /*bonus*/ 1.0, 0.0, 0.0};
  const std::vector<double> q = {0.5, 0.3, 0.2};
  const std::vector<double> accept = {0.9};  // 0.9 * 0.5 >= 0.2: rejected
  std::vector<double> scratch;
  expect_result(rejection_sample(input_of(3, {0}, q, p), {accept, std::vector<double>{0.1, 0.0}}, &scratch), {0}, 0, false);
  expect_result(rejection_sample(input_of(3, {0}, q, p), {accept, std::vector<double>{0.5, 0.0}}, &scratch), {1}, 0, false);
  expect_result(rejection_sample(input_of(3, {0}, q, p), {accept, std::vector<double>{kAlmostOne, 0.0}}, &scratch), {1}, 0, false);
}

// ---- Preconditions --------------------------------------------------------------------------

TEST(RejectionSampleDeathTest, BrokenShapesAbort) {
  std::vector<double> scratch;
  const std::vector<double> p = {0.5, 0.5, 0.5, 0.5};
  const std::vector<double> a = {0.5};
  const std::vector<double> r = {0.5, 0.5};
  MOERT_EXPECT_DEATH(rejection_sample(input_of(2, {0}, {}, {0.5, 0.5}), {a, r}, &scratch), "target_probs has 2 entries");
  MOERT_EXPECT_DEATH(rejection_sample(input_of(2, {0}, {1.0}, p), {a, r}, &scratch), "draft_probs has 1 entries");
  MOERT_EXPECT_DEATH(rejection_sample(input_of(2, {2}, {}, p), {a, r}, &scratch), "draft_tokens\\[0\\] = 2");
  MOERT_EXPECT_DEATH(rejection_sample(input_of(2, {0}, {}, p), {a, std::vector<double>{0.5}}, &scratch), "resample has 1");
  MOERT_EXPECT_DEATH(rejection_sample(input_of(2, {0}, {}, p), {std::vector<double>{1.0}, r}, &scratch), "accept\\[0\\] = 1");
  MOERT_EXPECT_DEATH(rejection_sample_greedy(input_of(0, {}, {}, {})), "vocab_size = 0");
}

// ---- Uniforms -------------------------------------------------------------------------------

TEST(SpecUniforms, ArePureFunctionsOfSeedStreamDomainPosition) {
  const PassUniforms a = make_pass_uniforms(7, 3, 100, 4);
  const PassUniforms b = make_pass_uniforms(7, 3, 100, 4);
  EXPECT_EQ(a.accept, b.accept);
  EXPECT_EQ(a.resample, b.resample);
  ASSERT_EQ(a.accept.size(), 4u);
  ASSERT_EQ(a.resample.size(), 5u);
  for (int i = 0; i <= 4; ++i) {
    const uint64_t position = 100 + static_cast<uint64_t>(i);
    if (i < 4) {
      EXPECT_EQ(a.accept[i], spec_uniform(7, 3, UniformDomain::kAccept, position));
    }
    // The resample uniform is the plain sampler's uniform at that output position.
    EXPECT_EQ(a.resample[i], sampling::counter_uniform(7, 3, position));
    EXPECT_NE(a.resample[i], spec_uniform(7, 3, UniformDomain::kAccept, position));
    EXPECT_NE(spec_uniform(7, 3, UniformDomain::kDraft, position), spec_uniform(7, 3, UniformDomain::kAccept, position));
  }
  // Other seeds and streams give other values.
  EXPECT_NE(make_pass_uniforms(8, 3, 100, 4).accept, a.accept);
  EXPECT_NE(make_pass_uniforms(7, 4, 100, 4).accept, a.accept);
}

// Position j gets the same uniforms whichever pass reaches it (so outputs do not depend on
// how generation was split into passes, nor on the batch).
TEST(SpecUniforms, DependOnPositionNotOnPass) {
  const PassUniforms first = make_pass_uniforms(11, 0, 20, 6);
  const PassUniforms later = make_pass_uniforms(11, 0, 23, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(later.accept[i], first.accept[i + 3]);
  for (int i = 0; i <= 3; ++i) EXPECT_EQ(later.resample[i], first.resample[i + 3]);
}

TEST(SpecUniformsDeathTest, PositionMustLeaveRoomForTheDomain) {
  MOERT_EXPECT_DEATH(spec_uniform(1, 0, UniformDomain::kAccept, uint64_t{1} << 62), "must be < 2\\^62");
}

}  // namespace
}  // namespace moert::spec
