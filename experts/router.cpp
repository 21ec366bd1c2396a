#include "experts/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.h"

namespace moert::experts {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kSigmoidNormEps = 1e-20;  // DeepSeek-V3 / GLM: w /= (sum(w) + 1e-20)

// Writes the indices of the `k` largest entries of score[0, n) into out_idx, in descending
// score order, ties to the lowest index. `order` is scratch of size n.
// Precondition: no NaN in score (the comparator must be a strict total order).
void top_k_desc(const float* score, int n, int k, std::vector<int32_t>& order, int32_t* out_idx) {
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const auto before = [score](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  std::copy(order.begin(), order.begin() + k, out_idx);
}

// Scratch reused across the rows of one route_tokens call; never carries state between rows.
struct RouteScratch {
  std::vector<float> prob;      // [E] softmax p, or sigmoid s
  std::vector<float> select;    // [E] selection score (sigmoid: c masked with -inf)
  std::vector<float> group;     // [G] group scores
  std::vector<int32_t> order;   // [max(E, G)] index scratch for top_k_desc
  std::vector<int32_t> groups;  // [topk_group] kept group ids
  std::vector<char> kept;       // [G] 1 iff the group is kept
};

// Multiplies w[0, K) by `scale`, after dividing by (sum + eps) when `renorm`.
void finish_weights(float* w, int k, bool renorm, double eps, float scale) {
  if (renorm) {
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += w[j];
    const double denom = sum + eps;
    for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / denom);
  }
  if (scale != 1.0f) {
    for (int j = 0; j < k; ++j) w[j] *= scale;
  }
}

void route_softmax_row(const RouterConfig& config, const float* logit, const float* bias, RouteScratch& scratch,
                       int32_t* ids, float* w) {
  const int num_experts = config.num_experts;
  float* p = scratch.prob.data();
  float max_logit = logit[0];
  for (int e = 1; e < num_experts; ++e) max_logit = std::max(max_logit, logit[e]);
  double sum = 0.0;
  for (int e = 0; e < num_experts; ++e) {
    p[e] = std::exp(logit[e] - max_logit);
    sum += p[e];
  }
  for (int e = 0; e < num_experts; ++e) p[e] = static_cast<float>(p[e] / sum);

  // Selection on p + bias (balancing, selection only); the weights stay p.
  const float* select = p;
  if (bias != nullptr) {
    float* c = scratch.select.data();
    for (int e = 0; e < num_experts; ++e) c[e] = p[e] + bias[e];
    select = c;
  }
  top_k_desc(select, num_experts, config.top_k, scratch.order, ids);
  for (int j = 0; j < config.top_k; ++j) w[j] = p[ids[j]];
  // Softmax weights sum to <= 1 and > 0, so no epsilon is needed.
  finish_weights(w, config.top_k, config.norm_topk_prob, 0.0, config.routed_scaling_factor);
}

void route_sigmoid_row(const RouterConfig& config, const float* logit, const float* bias,
                       RouteScratch& scratch, int32_t* ids, float* w) {
  const int num_experts = config.num_experts;
  float* s = scratch.prob.data();
  float* c = scratch.select.data();
  for (int e = 0; e < num_experts; ++e) {
    s[e] = 1.0f / (1.0f + std::exp(-logit[e]));
    c[e] = bias != nullptr ? s[e] + bias[e] : s[e];
  }

  if (config.n_group > 1) {
    const int group_size = num_experts / config.n_group;
    float* group_score = scratch.group.data();
    for (int g = 0; g < config.n_group; ++g) {
      const float* cg = c + static_cast<ptrdiff_t>(g) * group_size;
      if (group_size == 1) {
        group_score[g] = cg[0];
        continue;
      }
      float first = kNegInf;
      float second = kNegInf;
      for (int i = 0; i < group_size; ++i) {
        if (cg[i] > first) {
          second = first;
          first = cg[i];
        } else if (cg[i] > second) {
          second = cg[i];
        }
      }
      group_score[g] = first + second;
    }
    scratch.groups.resize(static_cast<size_t>(config.topk_group));
    top_k_desc(group_score, config.n_group, config.topk_group, scratch.order, scratch.groups.data());
    // Mask experts of dropped groups with -inf (spec §1.4: 0 would let a dropped expert
    // beat a kept one whose s + b < 0).
    std::vector<char>& kept = scratch.kept;
    kept.assign(static_cast<size_t>(config.n_group), 0);
    for (int32_t g : scratch.groups) kept[static_cast<size_t>(g)] = 1;
    for (int g = 0; g < config.n_group; ++g) {
      if (kept[static_cast<size_t>(g)] != 0) continue;
      std::fill(c + static_cast<ptrdiff_t>(g) * group_size, c + static_cast<ptrdiff_t>(g + 1) * group_size,
                kNegInf);
    }
  }

  // validate_router_config guarantees K <= topk_group * E / G unmasked (finite) scores.
  top_k_desc(c, num_experts, config.top_k, scratch.order, ids);
  for (int j = 0; j < config.top_k; ++j) w[j] = s[ids[j]];
  finish_weights(w, config.top_k, config.norm_topk_prob, kSigmoidNormEps, config.routed_scaling_factor);
}

}  // namespace

Status validate_router_config(const RouterConfig& config) {
  const int num_experts = config.num_experts;
  if (num_experts <= 0) {
    return invalid_argument("num_experts = " + std::to_string(num_experts) + " must be > 0");
  }
  if (config.top_k < 1 || config.top_k > num_experts) {
    return invalid_argument("top_k = " + std::to_string(config.top_k) + " must be in [1, num_experts = " +
                            std::to_string(num_experts) + "]");
  }
  if (config.score_func != ScoreFunc::kSoftmax && config.score_func != ScoreFunc::kSigmoid) {
    return invalid_argument("score_func = " + std::to_string(static_cast<int>(config.score_func)) +
                            " is not a ScoreFunc");
  }
  if (!std::isfinite(config.routed_scaling_factor) || config.routed_scaling_factor <= 0.0f) {
    return invalid_argument("routed_scaling_factor = " + std::to_string(config.routed_scaling_factor) +
                            " must be finite and > 0");
  }
  if (config.n_group < 1) {
    return invalid_argument("n_group = " + std::to_string(config.n_group) + " must be >= 1");
  }
  if (config.score_func == ScoreFunc::kSoftmax && config.n_group != 1) {
    return invalid_argument("n_group = " + std::to_string(config.n_group) +
                            " must be 1 for softmax routing (group-limited selection is sigmoid only)");
  }
  if (num_experts % config.n_group != 0) {
    return invalid_argument("num_experts = " + std::to_string(num_experts) + " is not divisible by n_group = " +
                            std::to_string(config.n_group));
  }
  if (config.topk_group < 1 || config.topk_group > config.n_group) {
    return invalid_argument("topk_group = " + std::to_string(config.topk_group) + " must be in [1, n_group = " +
                            std::to_string(config.n_group) + "]");
  }
  const int selectable = config.topk_group * (num_experts / config.n_group);
  if (config.top_k > selectable) {
    return invalid_argument("top_k = " + std::to_string(config.top_k) + " exceeds topk_group * num_experts / n_group = " +
                            std::to_string(selectable) + " experts left after group masking");
  }
  return Status::ok();
}

void route_tokens(const RouterConfig& config, const float* logits, int64_t num_tokens,
                  const float* correction_bias, int32_t* expert_ids, float* weights) {
  const Status valid = validate_router_config(config);
  MOERT_CHECK(valid.is_ok(), "route_tokens with an invalid RouterConfig: " << valid.message());
  MOERT_CHECK(num_tokens >= 0, "num_tokens = " << num_tokens << " must be >= 0");
  if (num_tokens == 0) return;
  MOERT_CHECK(logits != nullptr && expert_ids != nullptr && weights != nullptr,
              "route_tokens: logits, expert_ids and weights must be non-null for num_tokens = " << num_tokens);

  const int num_experts = config.num_experts;
  const int top_k = config.top_k;
  if (correction_bias != nullptr) {
    for (int e = 0; e < num_experts; ++e) {
      MOERT_CHECK(std::isfinite(correction_bias[e]), "correction_bias[" << e << "] = " << correction_bias[e]
                                                                         << " must be finite");
    }
  }

  RouteScratch scratch;
  scratch.prob.resize(static_cast<size_t>(num_experts));
  scratch.select.resize(static_cast<size_t>(num_experts));
  scratch.group.resize(static_cast<size_t>(config.n_group));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* logit = logits + t * num_experts;
    for (int e = 0; e < num_experts; ++e) {
      MOERT_CHECK(std::isfinite(logit[e]), "logits[" << t << ", " << e << "] = " << logit[e] << " must be finite");
    }
    int32_t* ids = expert_ids + t * top_k;
    float* w = weights + t * top_k;
    if (config.score_func == ScoreFunc::kSoftmax) {
      route_softmax_row(config, logit, correction_bias, scratch, ids, w);
    } else {
      route_sigmoid_row(config, logit, correction_bias, scratch, ids, w);
    }
  }
}

std::vector<int64_t> count_tokens_per_expert(const int32_t* expert_ids, int64_t num_tokens, int top_k,
                                             int num_experts) {
  MOERT_CHECK(num_experts > 0, "num_experts = " << num_experts << " must be > 0");
  MOERT_CHECK(top_k >= 0, "top_k = " << top_k << " must be >= 0");
  MOERT_CHECK(num_tokens >= 0, "num_tokens = " << num_tokens << " must be >= 0");
  std::vector<int64_t> load(static_cast<size_t>(num_experts), 0);
  const int64_t num_entries = num_tokens * top_k;
  MOERT_CHECK(num_entries == 0 || expert_ids != nullptr, "expert_ids is null for " << num_entries << " entries");
  for (int64_t i = 0; i < num_entries; ++i) {
    const int32_t e = expert_ids[i];
    MOERT_CHECK(e >= 0 && e < num_experts, "expert_ids[" << i / top_k << ", " << i % top_k << "] = " << e
                                                         << " must be in [0, " << num_experts << ")");
    ++load[static_cast<size_t>(e)];
  }
  return load;
}

double max_violation(const std::vector<int64_t>& load) {
  int64_t total = 0;
  int64_t max_load = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    MOERT_CHECK(load[e] >= 0, "load[" << e << "] = " << load[e] << " must be >= 0");
    total += load[e];
    max_load = std::max(max_load, load[e]);
  }
  if (total == 0) return 0.0;
  const double mean = static_cast<double>(total) / static_cast<double>(load.size());
  return (static_cast<double>(max_load) - mean) / mean;
}

}  // namespace moert::experts
