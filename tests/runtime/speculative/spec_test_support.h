// Helpers of the speculative-decoding tests: random distributions (test-only randomness
// from a seeded std::mt19937_64, so every test is deterministic), goodness-of-fit
// statistics, and a harness that runs many independent verification passes.
//
// Shape legend: K draft tokens, V vocabulary size, N passes.
#pragma once

#include <boost/math/special_functions/gamma.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "runtime/sampling/sampler.h"
#include "runtime/speculative/rejection_sampler.h"

namespace moert::spec::testing {

// A distribution over V tokens with every entry >= 0.05 / (1.05 V) (weights 0.05 + u^2),
// so 1e5 draws put >= ~400 expected counts in each bin for V <= 32.
inline std::vector<double> random_distribution(int vocab, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> probs(static_cast<size_t>(vocab));
  double total = 0.0;
  for (double& x : probs) {
    const double u = unit(rng);
    x = 0.05 + u * u;
    total += x;
  }
  for (double& x : probs) x /= total;
  return probs;
}

// Rows [num_rows, V] of random_distribution, row-major.
inline std::vector<double> random_rows(int num_rows, int vocab, std::mt19937_64& rng) {
  std::vector<double> rows;
  for (int r = 0; r < num_rows; ++r) {
    const std::vector<double> row = random_distribution(vocab, rng);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

inline std::vector<double> row(const std::vector<double>& table, int r, int vocab) {
  return {table.begin() + static_cast<std::ptrdiff_t>(r) * vocab,
          table.begin() + static_cast<std::ptrdiff_t>(r + 1) * vocab};
}

// Pearson chi-square goodness of fit of `counts` ([V]) to `probs` ([V]) over the support
// of probs (df = support size - 1). Returns the p-value, boost's regularised upper
// incomplete gamma Q(df / 2, X^2 / 2); 0 if any count falls outside the support.
inline double chi_square_p_value(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  double statistic = 0.0;
  int support = 0;
  for (size_t v = 0; v < probs.size(); ++v) {
    if (probs[v] == 0.0) {
      if (counts[v] != 0) return 0.0;
      continue;
    }
    ++support;
    const double expected = probs[v] * static_cast<double>(total);
    const double diff = static_cast<double>(counts[v]) - expected;
    statistic += diff * diff / expected;
  }
  if (support <= 1) return 1.0;
  return boost::math::gamma_q(0.5 * (support - 1), 0.5 * statistic);
}

// Smallest expected count over the support of probs for `total` draws (chi-square needs >= 5).
inline double min_expected_count(const std::vector<double>& probs, int64_t total) {
  double smallest = 1e300;
  for (double p : probs) {
    if (p > 0.0) smallest = std::min(smallest, p * static_cast<double>(total));
  }
  return smallest;
}

// sum_v |counts[v] / total - probs[v]| (twice the total-variation distance).
inline double l1_distance(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  double distance = 0.0;
  for (size_t v = 0; v < probs.size(); ++v) {
    distance += std::abs(static_cast<double>(counts[v]) / static_cast<double>(total) - probs[v]);
  }
  return distance;
}

// Signature of rejection_sample, so a test can swap in a deliberately wrong sampler.
using PassSampler =
    std::function<SpecVerifyResult(const SpecVerifyInput&, const SpecUniforms&, std::vector<double>*)>;

inline SpecVerifyResult real_sampler(const SpecVerifyInput& in, const SpecUniforms& u, std::vector<double>* scratch) {
  return rejection_sample(in, u, scratch);
}

// One fixed verification problem: context-free p ([K + 1, V]) and q ([K, V], or empty for
// one-hot drafts given by fixed_drafts [K]). With context-free rows, the token emitted at
// position j, given that the pass reached j (drafts 0..j-1 accepted, which uses none of
// position j's randomness), must be distributed as p_j.
struct SpecProblem {
  int vocab = 0;
  int num_draft = 0;
  std::vector<double> target_probs;    // [K + 1, V]
  std::vector<double> draft_probs;     // [K, V] or empty
  std::vector<int32_t> fixed_drafts;   // [K], used when draft_probs is empty
};

// Outcome of N independent passes (stream = pass index, position 0 onwards).
struct PassHistograms {
  std::vector<std::vector<int64_t>> counts_at;  // [K + 1][V]: emitted token at position j
  std::vector<int> num_accepted;                // [N]
};

// Runs passes [0, num_passes). Drafts are drawn from q_i with the kDraft uniforms (the
// proposer's own randomness); the verifier gets make_pass_uniforms(seed, pass, 0, K).
// `on_checkpoint(n, hist)` (optional) sees the histograms after n passes for each n in
// `checkpoints`.
inline PassHistograms run_passes(const SpecProblem& problem, int64_t num_passes, uint64_t seed,
                                 const PassSampler& sampler = real_sampler,
                                 const std::vector<int64_t>& checkpoints = {},
                                 const std::function<void(int64_t, const PassHistograms&)>& on_checkpoint = {}) {
  const int vocab = problem.vocab;
  const int num_draft = problem.num_draft;
  PassHistograms hist;
  hist.counts_at.assign(static_cast<size_t>(num_draft) + 1, std::vector<int64_t>(static_cast<size_t>(vocab), 0));
  hist.num_accepted.reserve(static_cast<size_t>(num_passes));
  std::vector<double> scratch;
  std::vector<int32_t> drafts(static_cast<size_t>(num_draft));
  std::vector<std::vector<double>> q_rows;
  for (int i = 0; i < num_draft && !problem.draft_probs.empty(); ++i) q_rows.push_back(row(problem.draft_probs, i, vocab));
  size_t next_checkpoint = 0;
  for (int64_t pass = 0; pass < num_passes; ++pass) {
    const uint64_t stream = static_cast<uint64_t>(pass);
    for (int i = 0; i < num_draft; ++i) {
      drafts[static_cast<size_t>(i)] =
          problem.draft_probs.empty()
              ? problem.fixed_drafts[static_cast<size_t>(i)]
              : sampling::sample_from_distribution(q_rows[static_cast<size_t>(i)],
                                                   spec_uniform(seed, stream, UniformDomain::kDraft, i));
    }
    const PassUniforms uniforms = make_pass_uniforms(seed, stream, 0, num_draft);
    const SpecVerifyInput input{vocab, drafts, problem.draft_probs, problem.target_probs};
    const SpecVerifyResult result = sampler(input, uniforms.view(), &scratch);
    for (size_t j = 0; j < result.tokens.size(); ++j) ++hist.counts_at[j][static_cast<size_t>(result.tokens[j])];
    hist.num_accepted.push_back(result.num_accepted);
    while (next_checkpoint < checkpoints.size() && checkpoints[next_checkpoint] == pass + 1) {
      if (on_checkpoint) on_checkpoint(pass + 1, hist);
      ++next_checkpoint;
    }
  }
  return hist;
}

}  // namespace moert::spec::testing
