#include "runtime/speculative/depth_controller.h"

#include <algorithm>
#include <iterator>

#include "core/check.h"

namespace moert::spec {

void StepTimeTable::observe(int64_t n, double seconds) {
  MOERT_CHECK(n >= 1, "size n = " << n << " must be >= 1");
  auto [it, inserted] = means_.emplace(n, seconds);
  if (!inserted) it->second = decay_ * it->second + (1.0 - decay_) * seconds;
}

double StepTimeTable::predict(int64_t n) const {
  MOERT_CHECK(!means_.empty() && n >= 1, "prediction at n = " << n << " from " << means_.size() << " sizes");
  const auto upper = means_.lower_bound(n);  // first size >= n
  double seconds = 0.0;
  if (upper == means_.end()) {
    const auto& [largest, at_largest] = *means_.rbegin();
    seconds = at_largest * static_cast<double>(n) / static_cast<double>(largest);
  } else if (upper->first == n || upper == means_.begin()) {
    seconds = upper->second;
  } else {
    const auto lower = std::prev(upper);
    const double fraction = static_cast<double>(n - lower->first) / static_cast<double>(upper->first - lower->first);
    seconds = lower->second + fraction * (upper->second - lower->second);
  }
  return std::max(seconds, 1e-12);
}

DepthController::DepthController(const DepthControllerConfig& config) : config_(config) {
  MOERT_CHECK(config.max_num_draft >= 1, "max_num_draft = " << config.max_num_draft << " must be >= 1");
  config_.probe_num_draft = std::clamp(config.probe_num_draft, 1, config.max_num_draft);
}

void DepthController::observe_target_step(int64_t num_tokens, double seconds) {
  if (num_tokens > 0) target_.observe(num_tokens, seconds);
}

void DepthController::observe_drafting(int64_t num_seqs, int num_draft, double seconds) {
  if (num_seqs > 0 && num_draft > 0) draft_.observe(num_seqs, seconds / num_draft);
}

DepthChoice DepthController::choose(int64_t num_decoding) const {
  if (!config_.adaptive) return {config_.max_num_draft, 0.0};
  if (num_decoding < 1) return {};
  if (target_.num_sizes() < 2 || draft_.empty()) return {config_.probe_num_draft, 0.0};
  const double step = target_.predict(num_decoding);
  SpecCostModel model;
  model.draft_step_cost = draft_.predict(num_decoding) / step;
  for (int k = 0; k <= config_.max_num_draft; ++k) {
    model.verify_cost.push_back(target_.predict(num_decoding * (k + 1)) / step);
  }
  return choose_draft_depth(alpha_.alpha(), model, config_.max_num_draft, config_.min_gain);
}

}  // namespace moert::spec
