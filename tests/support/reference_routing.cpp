#include "tests/support/reference_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace moert::testing {
namespace {

// Indices of `values` by descending value, ties: lower index first.
std::vector<int> order_descending(const std::vector<double>& values) {
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return values[a] > values[b]; });
  return order;
}

}  // namespace

ReferenceRoute reference_route(const experts::RouterConfig& config, const std::vector<float>& logits,
                               const float* bias) {
  const int num_experts = config.num_experts, top_k = config.top_k;
  const auto tokens = static_cast<int64_t>(logits.size()) / num_experts;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  ReferenceRoute out;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * num_experts;
    std::vector<double> score(static_cast<size_t>(num_experts));
    if (config.score_func == experts::ScoreFunc::kSoftmax) {
      const double max_logit = *std::max_element(row, row + num_experts);
      double total = 0.0;
      for (int e = 0; e < num_experts; ++e) total += score[e] = std::exp(row[e] - max_logit);
      for (double& s : score) s /= total;
    } else {
      for (int e = 0; e < num_experts; ++e) score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(row[e])));
    }
    std::vector<double> selection = score;
    if (bias != nullptr) {
      for (int e = 0; e < num_experts; ++e) selection[e] += bias[e];
    }
    if (config.n_group > 1) {
      // Group score: the sum of the group's two best selection scores (its one score when a
      // group holds one expert); experts of groups outside the best topk_group are masked.
      const int per_group = num_experts / config.n_group;
      std::vector<double> group_score(static_cast<size_t>(config.n_group));
      for (int g = 0; g < config.n_group; ++g) {
        std::vector<double> members(selection.begin() + g * per_group, selection.begin() + (g + 1) * per_group);
        std::sort(members.begin(), members.end(), std::greater<>());
        group_score[g] = members[0] + (per_group > 1 ? members[1] : 0.0);
      }
      const std::vector<int> groups = order_descending(group_score);
      std::vector<bool> kept(static_cast<size_t>(config.n_group), false);
      for (int i = 0; i < config.topk_group; ++i) kept[groups[i]] = true;
      for (int e = 0; e < num_experts; ++e) {
        if (!kept[e / per_group]) selection[e] = minus_inf;
      }
    }
    const std::vector<int> order = order_descending(selection);
    double total = 0.0;
    for (int k = 0; k < top_k; ++k) total += score[order[k]];
    for (int k = 0; k < top_k; ++k) {
      double w = score[order[k]];
      if (config.norm_topk_prob) w /= config.score_func == experts::ScoreFunc::kSoftmax ? total : total + 1e-20;
      out.ids.push_back(order[k]);
      out.weights.push_back(w * config.routed_scaling_factor);
    }
  }
  return out;
}

std::vector<double> reference_distribution(const std::vector<float>& logits, double temperature,
                                           const std::set<int32_t>& kept) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  std::vector<double> probs(logits.size(), 0.0);
  double total = 0.0;
  for (int32_t i : kept) {
    probs[i] = std::exp((logits[i] - max_logit) / temperature);
    total += probs[i];
  }
  for (double& x : probs) x /= total;
  return probs;
}

std::set<int32_t> reference_support(const std::vector<float>& logits, double temperature, int top_k, double top_p) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != -std::numeric_limits<float>::infinity()) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0 && top_k < static_cast<int>(order.size())) order.resize(static_cast<size_t>(top_k));
  const std::vector<double> probs = reference_distribution(logits, temperature, {order.begin(), order.end()});
  std::set<int32_t> kept;
  double mass = 0.0;
  for (int32_t id : order) {
    kept.insert(id);
    mass += probs[id];
    if (mass >= top_p) break;
  }
  return kept;
}

int32_t reference_sample(const std::vector<float>& logits, double temperature, int top_k, double top_p,
                         double uniform) {
  if (temperature == 0.0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const std::vector<double> probs =
      reference_distribution(logits, temperature, reference_support(logits, temperature, top_k, top_p));
  const double target = uniform * std::accumulate(probs.begin(), probs.end(), 0.0);
  double cumulative = 0.0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    last_positive = static_cast<int32_t>(i);
    cumulative += probs[i];
    if (cumulative > target) return last_positive;
  }
  return last_positive;
}

}  // namespace moert::testing
