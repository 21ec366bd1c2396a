// Per-step choice of the speculation depth from what the engine measured: the acceptance
// rate (AcceptanceRateEstimator), the target step time as a function of the tokens in the
// step, and the draft time per drafted position. Pure arithmetic: times are passed in.
//
// For B sequences ready to decode, in units of a plain decode step t(B):
//   v(K) = t(B * (K + 1)) / t(B)          verify pass over K + 1 tokens per sequence;
//   c    = d(B) / t(B)                    one drafted position for B sequences;
// with t and d read from tables of measured times (StepTimeTable). Depths never tried are
// interpolated; once tried they are measured, so a depth that looked cheap and is not gets
// corrected after a few steps.
// and K = choose_draft_depth(alpha, {c, v}, max). On a CPU (and on a GPU at large B) the
// step is compute bound, t grows with the tokens, v(K) approaches K + 1 and speculation
// switches itself off; at small B the step is bound by reading weights, v stays near 1
// and deep speculation pays when alpha is high.
#pragma once

#include <cstdint>
#include <map>

#include "runtime/speculative/adaptive_depth.h"

namespace moert::spec {

// Measured time as a function of a size n (tokens in a step, sequences drafted for): an
// exponentially weighted mean per observed n, read back by linear interpolation between
// the nearest observed sizes. Not a global fit: an MoE step's time is concave in its
// tokens (more tokens share the experts already read) and a line through decode and
// prefill steps would misjudge the few-token verify passes that matter here.
// Beyond the largest observed n the time grows in proportion to n (compute bound, the
// pessimistic side); below the smallest it stays flat.
class StepTimeTable {
 public:
  // decay in (0, 1]: weight kept by the previous mean of a size at each new observation.
  explicit StepTimeTable(double decay = 0.8) : decay_(decay) {}
  void observe(int64_t n, double seconds);  // n >= 1
  bool empty() const { return means_.empty(); }
  // Number of distinct sizes observed.
  size_t num_sizes() const { return means_.size(); }
  // Precondition: !empty(); n >= 1. Always > 0.
  double predict(int64_t n) const;

 private:
  double decay_;
  std::map<int64_t, double> means_;  // n -> weighted mean seconds
};

struct DepthControllerConfig {
  int max_num_draft = 4;   // K (fixed), or the most drafts (adaptive); >= 1
  bool adaptive = false;   // --spec-k auto
  double min_gain = 0.02;  // speculate only when the expected speedup exceeds 1 + min_gain
  // Adaptive: depth used until the target was timed at two sizes and the draft at one.
  // Default min(4, max).
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
  StepTimeTable target_;  // forward seconds vs tokens in the step
  StepTimeTable draft_;   // seconds per drafted position vs sequences drafted for
};

}  // namespace moert::spec
