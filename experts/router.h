// MoE router: turns router logits into the K experts each token goes to and their gate
// weights, for every architecture in docs/moe.md §1 (Mixtral, Qwen2/3-MoE, DeepSeek-V3,
// GLM-4.5). Pure logic: no device code, no MPI, no framework types.
//
// Shapes: T tokens, E routed experts, K experts per token (top-k), G expert groups
// (E / G experts per group, contiguous: group g holds experts [g*E/G, (g+1)*E/G)).
//
// Terms:
//   selection score: the value the top-k ranks on. softmax: p = softmax(logits), plus
//     the balancing bias when one is passed.
//     sigmoid: c = sigmoid(logits) + correction_bias, with experts outside the kept
//     groups set to -inf (never 0: a biased score may be negative).
//   weight: the gate value that multiplies the expert's output. softmax: p, sigmoid: the
//     unbiased sigmoid s; then optionally renormalised and scaled.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace moert::experts {

enum class ScoreFunc {
  kSoftmax,  // Mixtral, Qwen2-MoE, Qwen3-MoE: p = softmax(logits) over the E experts
  kSigmoid,  // DeepSeek-V3, GLM-4.5: s = sigmoid(logits), selection on s + correction_bias
};

// Validated once, up front, by validate_router_config.
struct RouterConfig {
  int num_experts = 0;  // E: routed experts (no shared experts). Must be > 0.
  int top_k = 0;        // K: experts per token, 1 <= K <= E.
  ScoreFunc score_func = ScoreFunc::kSoftmax;  // how logits become scores.
  // Renormalise the K selected weights to sum 1. softmax: w /= sum(w); sigmoid:
  // w /= (sum(w) + 1e-20). Mixtral always renormalises: its caller sets this to true.
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;  // multiplies the final weights; finite and > 0.
  // G: expert groups for group-limited selection (sigmoid only; softmax needs 1).
  // Group score = sum of the group's top-2 selection scores (its only score if E/G == 1).
  int n_group = 1;
  int topk_group = 1;  // groups kept per token, 1 <= topk_group <= G.
};

// Ok, or kInvalidArgument naming the offending value. Requires E > 0, 1 <= K <= E,
// E % G == 0, 1 <= topk_group <= G, K <= topk_group * E / G (enough unmasked experts),
// n_group == 1 for softmax, and a finite routed_scaling_factor > 0.
Status validate_router_config(const RouterConfig& config);

// Routes T tokens.
//   logits:          [T, E] row-major float32, = x Wg^T computed by the caller; finite.
//   correction_bias: [E] finite, or nullptr (= all 0). Selection only: sigmoid ranks
//                    s + bias (DeepSeek-V3's e_score_correction_bias), softmax ranks
//                    p + bias (auxiliary-loss-free balancing); the weights stay s or p.
//   expert_ids:      [T, K] output, ordered by descending selection score, ties broken
//                    by the lowest expert id.
//   weights:         [T, K] output, aligned with expert_ids.
// Precondition: validate_router_config(config) is ok (checked with MOERT_CHECK).
// Deterministic and row-independent: row t of the outputs depends only on row t of
// logits (and on config and correction_bias), so any batching gives the same result.
void route_tokens(const RouterConfig& config, const float* logits, int64_t num_tokens,
                  const float* correction_bias, int32_t* expert_ids, float* weights);

// Tokens routed to each expert: [E], summed over the T*K entries of expert_ids [T, K].
// Every id must lie in [0, E) (MOERT_CHECK).
std::vector<int64_t> count_tokens_per_expert(const int32_t* expert_ids, int64_t num_tokens,
                                             int top_k, int num_experts);

// MaxVio = (max_e load[e] - mean) / mean, with mean the perfectly balanced load
// (sum / E), as in arXiv:2408.15664. 0 for an empty or all-zero load. Loads must be >= 0.
double max_violation(const std::vector<int64_t>& load);

}  // namespace moert::experts
