#include "runtime/spec/depth_controller.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace moert::spec {

void LinearTimeModel::observe(double n, double seconds) {
  s0_ = decay_ * s0_ + 1.0;
  s1_ = decay_ * s1_ + n;
  s2_ = decay_ * s2_ + n * n;
  sy_ = decay_ * sy_ + seconds;
  sny_ = decay_ * sny_ + n * seconds;
  min_n_ = num_observations_ == 0 ? n : std::min(min_n_, n);
  max_n_ = num_observations_ == 0 ? n : std::max(max_n_, n);
  ++num_observations_;
}

double LinearTimeModel::predict(double n) const {
  MOERT_CHECK(!empty(), "prediction from an empty time model");
  const double mean_y = sy_ / s0_;
  const double spread = s0_ * s2_ - s1_ * s1_;
  if (!has_slope() || !(spread > 1e-12 * s0_ * s2_)) return std::max(mean_y, 1e-12);
  const double slope = std::max(0.0, (s0_ * sny_ - s1_ * sy_) / spread);
  const double intercept = (sy_ - slope * s1_) / s0_;
  return std::max(intercept + slope * n, 1e-12);
}

DepthController::DepthController(const DepthControllerConfig& config) : config_(config) {
  MOERT_CHECK(config.max_num_draft >= 1, "max_num_draft = " << config.max_num_draft << " must be >= 1");
  config_.probe_num_draft = std::clamp(config.probe_num_draft, 1, config.max_num_draft);
}

void DepthController::observe_target_step(int64_t num_tokens, double seconds) {
  if (num_tokens > 0) target_.observe(static_cast<double>(num_tokens), seconds);
}

void DepthController::observe_drafting(int64_t num_seqs, int num_draft, double seconds) {
  if (num_seqs > 0 && num_draft > 0) draft_.observe(static_cast<double>(num_seqs), seconds / num_draft);
}

DepthChoice DepthController::choose(int64_t num_decoding) const {
  if (!config_.adaptive) return {config_.max_num_draft, 0.0};
  if (num_decoding < 1) return {};
  if (!target_.has_slope() || draft_.empty()) return {config_.probe_num_draft, 0.0};
  const double batch = static_cast<double>(num_decoding);
  const double step = target_.predict(batch);
  SpecCostModel model;
  model.draft_step_cost = draft_.predict(batch) / step;
  for (int k = 0; k <= config_.max_num_draft; ++k) model.verify_cost.push_back(target_.predict(batch * (k + 1)) / step);
  return choose_draft_depth(alpha_.alpha(), model, config_.max_num_draft, config_.min_gain);
}

}  // namespace moert::spec
