// Choosing the speculation depth K from the measured acceptance rate, and the acceptance
// statistics it is measured from. Pure arithmetic, no clocks: the costs are ratios the
// caller measured.
//
// Terms: alpha is the probability that a draft token is accepted given that every earlier
// draft of the pass was (Leviathan et al. 2023: alpha = E[sum_x min(p(x), q(x))]). A
// *pass* is one target forward verifying K drafts; it emits num_accepted + 1 tokens.
//
// Model (Leviathan et al. §3, acceptances i.i.d. with rate alpha):
//   E(alpha, K)    = sum_{i=0..K} alpha^i = (1 - alpha^(K+1)) / (1 - alpha)   (alpha = 1: K + 1)
//                    expected tokens per pass;
//   cost(K)        = K * c + v(K), in units of one 1-token target step, where
//                    c    = cost of one draft step / cost of one 1-token target step, and
//                    v(K) = cost of one target pass over K + 1 tokens / cost of a 1-token step;
//   speedup(K)     = E(alpha, K) / cost(K)       over plain decoding (1 token per step).
// Leviathan's Theorem 3.8 takes v(K) = 1 (verification as cheap as one step, true while the
// step is memory bound). For an MoE target that is optimistic: K + 1 tokens route to more
// distinct experts than one, so the pass reads more expert weights; SpecCostModel takes v
// as a measured table for that reason.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace moert::spec {

// E(alpha, K): expected tokens per pass. Preconditions: alpha in [0, 1], K >= 0. Summed as
// a power series, exact at alpha = 1 and without the cancellation of the closed form near 1.
double expected_tokens_per_pass(double alpha, int num_draft);

// Costs relative to one 1-token target step. Validate once with validate_cost_model().
struct SpecCostModel {
  // c: one draft step / one 1-token target step, >= 0. 0 for the n-gram proposer (CPU
  // lookup). Default 0.
  double draft_step_cost = 0.0;
  // v: verify_cost[K] = target pass over K + 1 tokens / 1-token target step, for
  // K = 0..max depth considered (so verify_cost[0] is 1 when measured consistently); each
  // > 0, normally >= 1 and growing with K. Empty = 1 for every K (Leviathan's
  // assumption). Default empty.
  std::vector<double> verify_cost;

  // v(K): verify_cost[K], or 1 when the table is empty. Precondition: K within the table.
  double verify_cost_at(int num_draft) const;
};

// Checks draft_step_cost finite and >= 0, every verify_cost entry finite and > 0, and the
// table (if not empty) covering K = 0..max_num_draft. The error names the value, e.g.
// "verify_cost[3] = -1 must be finite and > 0".
Status validate_cost_model(const SpecCostModel& model, int max_num_draft);

// speedup(alpha, K) = E(alpha, K) / (K * c + v(K)). K = 0 gives 1 / v(0) (1 for v = 1).
double expected_speedup(double alpha, int num_draft, const SpecCostModel& model);

struct DepthChoice {
  int num_draft = 0;     // K; 0 = speculation off
  double speedup = 1.0;  // expected_speedup at that K (1 when off)
};

// The K in [1, max_num_draft] of the largest expected_speedup (the smallest K on ties: it
// wastes less work). Returns {0, 1} when that speedup is not > 1 + min_gain, i.e. when
// speculating is not worth its risk and bookkeeping. Preconditions: alpha in [0, 1],
// max_num_draft >= 1, min_gain >= 0, model valid for max_num_draft. Cost O(max_num_draft^2)
// (E summed per K), negligible for K <= 32.
DepthChoice choose_draft_depth(double alpha, const SpecCostModel& model, int max_num_draft, double min_gain = 0.02);

// Online alpha from verification outcomes: an exponentially weighted ratio of accepted
// drafts to *tested* drafts.
//
// A pass that proposed k and accepted a tested a + 1 positions if a < k (the rejected one
// included) and k if a == k; positions after a rejection are never tested and carry no
// information. (accepted / proposed would under-estimate: at alpha = 0.8, K = 8 its
// expectation is E[a] / 8 = 0.42.) accepted / tested is the maximum-likelihood estimate of
// alpha under the i.i.d. model.
//
// Estimate = A / T with A <- decay * A + a and T <- decay * T + tested after each pass;
// both start at prior_alpha * prior_trials and prior_trials. A pass's weight halves after
// ln(2) / -ln(decay) passes (about 1 / (1 - decay) passes of memory: 50 at decay 0.98).
class AcceptanceRateEstimator {
 public:
  // Preconditions (MOERT_CHECK): decay in (0, 1], prior_alpha in [0, 1], prior_trials > 0.
  // decay = 1 is the plain cumulative ratio.
  explicit AcceptanceRateEstimator(double decay = 0.98, double prior_alpha = 0.5, double prior_trials = 4.0);

  // Records one pass: num_proposed >= 0 drafts, 0 <= num_accepted <= num_proposed of them
  // accepted. A pass with no drafts tests nothing and changes nothing (no decay either).
  void observe(int num_proposed, int num_accepted);

  // Current estimate in [0, 1].
  double alpha() const { return weighted_accepted_ / weighted_tested_; }

 private:
  double decay_;
  double weighted_accepted_;  // A
  double weighted_tested_;    // T > 0
};

// Cumulative per-position acceptance statistics over passes (what vLLM reports as
// per-position acceptance rate and mean acceptance length).
//
// Invariants: for every i, accepted_at(i) <= tested_at(i) <= proposed_at(i);
// tested_at(0) == proposed_at(0); tested_at(i) == number of passes with proposed > i whose
// drafts 0..i-1 were all accepted; sum_i accepted_at(i) == num_accepted_tokens().
class AcceptanceStats {
 public:
  // Records one pass; same preconditions as AcceptanceRateEstimator::observe. A pass with
  // no drafts still counts as a pass (it emitted one token).
  void record(int num_proposed, int num_accepted);

  int64_t num_passes() const { return num_passes_; }
  int64_t num_draft_tokens() const { return num_draft_tokens_; }
  int64_t num_accepted_tokens() const { return num_accepted_tokens_; }
  // Longest pass recorded so far (positions 0..max_num_draft()-1 have counters).
  int max_num_draft() const { return static_cast<int>(proposed_at_.size()); }
  // Passes that proposed / tested / accepted a draft at position i (0 beyond the longest pass).
  int64_t proposed_at(int position) const;
  int64_t tested_at(int position) const;
  int64_t accepted_at(int position) const;

  // num_accepted_tokens / num_passes (0 with no passes).
  double mean_accepted_per_pass() const;
  // Emitted tokens per pass: mean_accepted_per_pass + 1 (0 with no passes); compare with
  // expected_tokens_per_pass(alpha, K).
  double mean_tokens_per_pass() const;
  // num_accepted_tokens / num_draft_tokens (0 with no drafts).
  double acceptance_rate() const;
  // accepted_at(i) / proposed_at(i): how often position i's draft survives (vLLM's
  // per-position rate; alpha^(i+1) under the i.i.d. model). 0 if never proposed.
  double acceptance_rate_at(int position) const;
  // accepted_at(i) / tested_at(i): alpha at position i given the earlier ones passed.
  // 0 if never tested.
  double conditional_acceptance_at(int position) const;

  // Adds another set of passes (e.g. another rank's): every counter is summed.
  void merge(const AcceptanceStats& other);
  // Flat counters for transport: [passes, drafts, accepted, P, proposed_at[P],
  // tested_at[P], accepted_at[P]]; from_counts() inverts it (false if malformed).
  std::vector<int64_t> to_counts() const;
  static bool from_counts(std::span<const int64_t> counts, AcceptanceStats* out);

 private:
  int64_t num_passes_ = 0;
  int64_t num_draft_tokens_ = 0;
  int64_t num_accepted_tokens_ = 0;
  std::vector<int64_t> proposed_at_;  // [max K seen]
  std::vector<int64_t> tested_at_;    // [max K seen]
  std::vector<int64_t> accepted_at_;  // [max K seen]
};

}  // namespace moert::spec
