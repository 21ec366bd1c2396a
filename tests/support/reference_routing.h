// Float64 references for routing and sampling, written from the rules in docs/moe.md §1 and
// runtime/sampling/sampler.h, independently of experts/router.cpp and sampling/sampler.cpp:
// full stable sorts instead of partial selection, double throughout. router_test and
// sampler_test check the host code against them; the backend conformance harness checks
// every backend's route and sample_rows ops against them.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "experts/router.h"

namespace moert::testing {

struct ReferenceRoute {
  std::vector<int32_t> ids;     // [T, K], by descending selection score, ties: lower id
  std::vector<double> weights;  // [T, K]
};
// T rows of `logits` ([T, E]); `bias` [E] or null.
ReferenceRoute reference_route(const experts::RouterConfig& config, const std::vector<float>& logits,
                               const float* bias);

// Softmax of logits / temperature over `kept` (zero elsewhere), renormalised.
std::vector<double> reference_distribution(const std::vector<float>& logits, double temperature,
                                           const std::set<int32_t>& kept);
// The support after top-k (0: off) then top-p over the temperature-scaled distribution, by a
// full stable sort (descending logit, lower id first).
std::set<int32_t> reference_support(const std::vector<float>& logits, double temperature, int top_k, double top_p);
// One draw: greedy (temperature 0) is the argmax with the lowest id on ties; otherwise the
// inverse CDF of the filtered distribution in ascending id order at `uniform` in [0, 1).
int32_t reference_sample(const std::vector<float>& logits, double temperature, int top_k, double top_p,
                         double uniform);

}  // namespace moert::testing
