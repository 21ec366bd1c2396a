// Per-step choice of the speculation depth from what the engine measured: the acceptance
// rate (AcceptanceRateEstimator), the target step time as a function of the tokens in the
// step, and the draft time per drafted position. Pure arithmetic: times are passed in.
//
// For B sequences ready to decode, in units of a plain decode step t(B):
//   v(K) = t(B * (K + 1)) / t(B)          verify pass over K + 1 tokens per sequence;
//   c    = d(B) / t(B)                    one drafted position for B sequences;
// and K = choose_draft_depth(alpha, {c, v}, max). On a CPU (and on a GPU at large B) the
// step is compute bound, t grows with the tokens, v(K) approaches K + 1 and speculation
// switches itself off; at small B the step is bound by reading weights, v stays near 1
// and deep speculation pays when alpha is high.
#pragma once

#include <cstdint>

#include "runtime/spec/adaptive_depth.h"

namespace moert::spec {

// Exponentially weighted least-squares line y = a + b n through observations (n, y).
// Invariant: the weights of older observations decay by `decay` per new observation.
class LinearTimeModel {
 public:
  explicit LinearTimeModel(double decay = 0.95) : decay_(decay) {}
  void observe(double n, double seconds);
  // Whether two observations with different n (by >= 25%) have been seen, so b is known.
  bool has_slope() const { return num_observations_ > 0 && max_n_ >= 1.25 * min_n_; }
  bool empty() const { return num_observations_ == 0; }
  // a + b n with b clamped to >= 0 and the prediction to > 0; the weighted mean of y
  // without a slope. Precondition: !empty().
  double predict(double n) const;

 private:
  double decay_;
  double s0_ = 0, s1_ = 0, s2_ = 0, sy_ = 0, sny_ = 0;  // sums of w, w n, w n^2, w y, w n y
  double min_n_ = 0, max_n_ = 0;
  int64_t num_observations_ = 0;
};

struct DepthControllerConfig {
  int max_num_draft = 4;   // K (fixed), or the most drafts (adaptive); >= 1
  bool adaptive = false;   // --spec-k auto
  double min_gain = 0.02;  // speculate only when the expected speedup exceeds 1 + min_gain
  // Adaptive: depth used until both time models are measured. Default min(4, max).
  int probe_num_draft = 4;
};

class DepthController {
 public:
  explicit DepthController(const DepthControllerConfig& config);

  // One target forward over `num_tokens` tokens took `seconds`.
  void observe_target_step(int64_t num_tokens, double seconds);
  // Drafting K positions for `num_seqs` sequences took `seconds` (so seconds / K each).
  void observe_drafting(int64_t num_seqs, int num_draft, double seconds);
  // One verified pass of one sequence.
  void observe_pass(int num_proposed, int num_accepted) { alpha_.observe(num_proposed, num_accepted); }

  // K for a step with `num_decoding` sequences ready to decode (0: do not speculate).
  DepthChoice choose(int64_t num_decoding) const;
  double alpha() const { return alpha_.alpha(); }

 private:
  DepthControllerConfig config_;
  AcceptanceRateEstimator alpha_;
  LinearTimeModel target_;
  LinearTimeModel draft_;  // seconds per drafted position vs sequences
};

}  // namespace moert::spec
