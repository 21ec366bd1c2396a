#include "experts/placement/balance.h"

#include <cmath>

#include "experts/router.h"
#include "core/check.h"

namespace moert::experts {
namespace {

bool has_tokens(std::span<const int64_t> load) {
  for (int64_t value : load) {
    if (value > 0) return true;
  }
  return false;
}

}  // namespace

double mean_layer_max_violation(std::span<const int64_t> loads, int num_layers, int num_experts) {
  MOERT_CHECK(loads.size() == static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts),
              "loads has " << loads.size() << " entries, expected " << num_layers << " x " << num_experts);
  double sum = 0.0;
  int layers = 0;
  for (int l = 0; l < num_layers; ++l) {
    const std::span<const int64_t> layer = loads.subspan(static_cast<size_t>(l) * num_experts, num_experts);
    if (!has_tokens(layer)) continue;
    sum += max_violation(std::vector<int64_t>(layer.begin(), layer.end()));
    ++layers;
  }
  return layers > 0 ? sum / layers : 0.0;
}

LoadTracker::LoadTracker(int num_layers, int num_experts)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      run_loads_(static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts), 0) {
  MOERT_CHECK(num_layers >= 1 && num_experts >= 1, "LoadTracker needs L >= 1 and E >= 1, got " << num_layers << ", "
                                                                                              << num_experts);
}

void LoadTracker::add_step(std::span<const int64_t> loads) {
  MOERT_CHECK(loads.size() == run_loads_.size(),
              "step loads have " << loads.size() << " entries, expected " << run_loads_.size());
  for (size_t i = 0; i < loads.size(); ++i) {
    MOERT_CHECK(loads[i] >= 0, "load " << i << " = " << loads[i] << " must be >= 0");
    run_loads_[i] += loads[i];
  }
  ++num_steps_;
  last_step_ = mean_layer_max_violation(loads, num_layers_, num_experts_);
  if (has_tokens(loads)) {
    ++steps_with_tokens_;
    step_sum_ += last_step_;
  }
}

double LoadTracker::mean_step_max_violation() const {
  return steps_with_tokens_ > 0 ? step_sum_ / static_cast<double>(steps_with_tokens_) : 0.0;
}

double LoadTracker::run_max_violation(int layer) const {
  MOERT_CHECK(layer >= 0 && layer < num_layers_, "layer " << layer << " outside [0, " << num_layers_ << ")");
  const auto begin = run_loads_.begin() + static_cast<ptrdiff_t>(layer) * num_experts_;
  return max_violation(std::vector<int64_t>(begin, begin + num_experts_));
}

double LoadTracker::run_max_violation() const {
  return mean_layer_max_violation(run_loads_, num_layers_, num_experts_);
}

void update_balance_bias(std::span<const int64_t> load, float gamma, std::span<float> bias) {
  MOERT_CHECK(load.size() == bias.size(), "load has " << load.size() << " entries, bias " << bias.size());
  MOERT_CHECK(std::isfinite(gamma) && gamma >= 0.0f, "gamma = " << gamma << " must be finite and >= 0");
  int64_t total = 0;
  for (int64_t value : load) total += value;
  if (total == 0) return;
  // Compare load * E with total instead of load with the mean: exact in integers.
  const auto num_experts = static_cast<int64_t>(load.size());
  for (size_t e = 0; e < load.size(); ++e) {
    const int64_t scaled = load[e] * num_experts;
    if (scaled < total) bias[e] += gamma;       // underloaded: mean - load > 0
    else if (scaled > total) bias[e] -= gamma;  // overloaded
  }
}

}  // namespace moert::experts
