// Load accounting and the auxiliary-loss-free bias rule (docs/moe.md §2.1). Pure logic.
//
// Shapes: L model layers (dense layers carry all-zero loads and are skipped), E experts.
// Terms:
//   load[l, e]: tokens routed to expert e in layer l (one per (token, selected expert)).
//   MaxVio:     (max_e load - mean) / mean with mean = sum / E (experts::max_violation).
//   batch MaxVio: of one step's loads; run MaxVio: of the loads summed over the run
//     (the paper's MaxVio_batch and MaxVio_global); both averaged over the layers that
//     saw tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moert::experts {

class LoadTracker {
 public:
  LoadTracker(int num_layers, int num_experts);
  // One step's loads, flattened [L, E] (MOERT_CHECK on the size and on negative values).
  void add_step(std::span<const int64_t> loads);

  int64_t num_steps() const { return num_steps_; }
  // Batch MaxVio of the last step, averaged over its layers with tokens (0 if none).
  double last_step_max_violation() const { return last_step_; }
  // Mean over the steps with tokens of their batch MaxVio.
  double mean_step_max_violation() const;
  // Run MaxVio of layer l (0 for a layer without tokens) and its mean over such layers.
  double run_max_violation(int layer) const;
  double run_max_violation() const;
  // Loads summed over the run, [L, E].
  const std::vector<int64_t>& run_loads() const { return run_loads_; }

 private:
  int num_layers_, num_experts_;
  std::vector<int64_t> run_loads_;
  int64_t num_steps_ = 0;
  int64_t steps_with_tokens_ = 0;
  double step_sum_ = 0.0;
  double last_step_ = 0.0;
};

// Mean over the layers with tokens of each layer's MaxVio; loads flattened [L, E].
double mean_layer_max_violation(std::span<const int64_t> loads, int num_layers, int num_experts);

// Algorithm 1 of arXiv:2408.15664 for one layer: bias[e] += gamma * sign(mean - load[e])
// (sign(0) = 0, so a balanced expert keeps its bias). A layer without tokens is left
// alone. gamma >= 0 and finite (MOERT_CHECK).
void update_balance_bias(std::span<const int64_t> load, float gamma, std::span<float> bias);

}  // namespace moert::experts
