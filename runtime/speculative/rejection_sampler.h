// Verification of one sequence's draft tokens against the target model: the rejection
// sampler of speculative decoding (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023 with
// p and q swapped). Pure logic: no device code, randomness passed in.
//
// Shape legend: K draft tokens of this sequence (0 <= K), V vocabulary size.
//   draft_tokens  [K]        int32, the proposer's tokens x_0..x_{K-1}
//   draft_probs   [K, V]     q_i, row-major; empty = the proposer has no probabilities
//                            (n-gram): q_i is one-hot at x_i
//   target_probs  [K + 1, V] p_i, row-major; row i is the target's distribution for the
//                            token after the prefix extended by x_0..x_{i-1}
//
// Terms (one pass = one target forward over the K drafts):
//   accepted  a draft token x_i kept because it passed the test at position i;
//   rejected  the first draft token that fails; the pass stops there;
//   recovered the token emitted at the rejected position, drawn from
//             norm(max(0, p_i - q_i)) (the residual);
//   bonus     the token emitted at position K when all K drafts are accepted, drawn from
//             p_K (greedy: its argmax).
// Every pass emits num_accepted + 1 tokens: the accepted drafts, then one recovered or
// bonus token (the *final* token).
//
// Both p and q are the distributions *after* temperature / top-k / top-p of the request
// (processed_distributions() below, which is sampling::sampling_distribution row by row);
// applying the same processing to both is what makes the output distribution exactly p.
//
// Randomness: every uniform is a pure function of (seed, stream, domain, output position)
// (spec_uniform), so a request's tokens never depend on batching, on other requests or on
// how its output was split into passes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampler.h"

namespace moert::spec {

// One pass's inputs for one sequence. Preconditions (invariants of the caller, not user
// input; broken ones abort via MOERT_CHECK): vocab_size >= 1; every draft token in [0, V);
// draft_probs.size() is 0 or K * V; target_probs.size() == (K + 1) * V (checked on entry);
// every row non-negative and finite with a positive entry (checked by
// sample_from_distribution on the rows it draws from). Rows are expected to sum to 1 (not
// checked: rounding); see kResidualFallback in the .cpp for the degenerate residual.
struct SpecVerifyInput {
  int vocab_size = 0;                      // V
  std::span<const int32_t> draft_tokens;   // [K]
  std::span<const double> draft_probs;     // [K, V] or empty (one-hot q)
  std::span<const double> target_probs;    // [K + 1, V]

  int num_draft() const { return static_cast<int>(draft_tokens.size()); }
};

// The uniforms of one pass, all in [0, 1).
//   accept[i]   tests draft position i (i < K);
//   resample[i] draws the final token when it lands at position i (i <= K).
struct SpecUniforms {
  std::span<const double> accept;    // [K]
  std::span<const double> resample;  // [K + 1]
};

// Result of one pass. Invariant: tokens.size() == num_accepted + 1, tokens[0..num_accepted)
// are the accepted drafts (equal to draft_tokens[0..num_accepted)), tokens.back() is the
// final token; is_bonus == (num_accepted == K).
struct SpecVerifyResult {
  std::vector<int32_t> tokens;  // [num_accepted + 1]
  int num_accepted = 0;         // 0..K, for acceptance statistics
  bool is_bonus = false;        // final token is the bonus token (else recovered)
};

// Greedy verification (temperature 0): accept x_i while x_i == argmax(p_i) (lowest id on
// ties, as the greedy sampler); the final token is argmax(p_n) at the first mismatch n, or
// the bonus argmax(p_K). Ignores draft_probs. Passing p rows from processed_distributions()
// with a greedy SamplingParams (one-hot at the logits' argmax) makes every emitted token
// equal to what sampling::sample_token would pick for the same prefix.
SpecVerifyResult rejection_sample_greedy(const SpecVerifyInput& input);

// Sampled verification. Position i accepts x_i iff q_i(x_i) > 0 and
// accept[i] * q_i(x_i) < p_i(x_i), i.e. with probability min(1, p_i(x_i) / q_i(x_i)) for a
// uniform accept[i]; a draft of target probability 0 is never accepted, and one with
// q_i(x_i) == 0 (not drawn from q_i, a caller bug) is rejected (as vLLM does) instead of
// dividing by zero. At the first rejection the recovered token is
// sample_from_distribution(max(0, p_i - q_i), resample[i]); with all accepted the bonus
// token is sample_from_distribution(p_K, resample[K]) — for a p_K made by
// processed_distributions() that is exactly sampling::sample_token's draw with the same
// uniform. Precondition: x_i was drawn from q_i (else the output is not distributed as p).
// `scratch` ([V], resized) holds the residual; pass the same vector across calls.
SpecVerifyResult rejection_sample(const SpecVerifyInput& input, const SpecUniforms& uniforms,
                                  std::vector<double>* scratch);

// Dispatch on params.is_greedy(): greedy ignores `uniforms` and `scratch`.
SpecVerifyResult verify_draft(const SpecVerifyInput& input, const sampling::SamplingParams& params,
                              const SpecUniforms& uniforms, std::vector<double>* scratch);

// Writes into *probs ([num_rows, V], resized) sampling::sampling_distribution of each
// logits row ([num_rows, V] row-major): the processing to apply to target logits
// (num_rows = K + 1) and to draft logits (num_rows = K) with the same params.
void processed_distributions(const float* logits, int num_rows, int vocab_size,
                             const sampling::SamplingParams& params, std::vector<double>* probs);

// ---- Uniforms ------------------------------------------------------------------------------

// Independent uses of randomness at one output position. The domain occupies the counter's
// top two bits, so positions must be < 2^62.
enum class UniformDomain : uint64_t {
  // Draws the token emitted at this position (recovered or bonus). Equal to the plain
  // sampler's uniform counter_uniform(seed, stream, position), so a bonus token is the
  // token non-speculative sampling would draw from the same distribution.
  kResample = 0,
  kAccept = 1,  // the acceptance test of the draft token at this position
  kDraft = 2,   // a model-based proposer sampling its draft token for this position
};

// counter_uniform(seed, stream, domain << 62 | position): in [0, 1), a pure function of its
// arguments; distinct (domain, position) give distinct counters, hence unrelated values.
// `stream` is the sample index within the request, `position` the output position (number
// of tokens the sample had generated before this one), as in the engine's plain sampling.
double spec_uniform(uint64_t seed, uint64_t stream, UniformDomain domain, uint64_t position);

// Owns the uniforms of one pass whose first draft token lands at output position
// `first_position`: accept[i] = spec_uniform(.., kAccept, first_position + i) for i < K,
// resample[i] = spec_uniform(.., kResample, first_position + i) for i <= K. A position's
// uniforms are the same whichever pass reaches it, and each is consumed at most once over
// the whole generation (a pass that emits positions [f, f + n] starts the next at f + n + 1).
struct PassUniforms {
  std::vector<double> accept;    // [K]
  std::vector<double> resample;  // [K + 1]

  SpecUniforms view() const { return {accept, resample}; }
};
PassUniforms make_pass_uniforms(uint64_t seed, uint64_t stream, uint64_t first_position, int num_draft);

}  // namespace moert::spec
