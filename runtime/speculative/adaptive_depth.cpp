#include "runtime/speculative/adaptive_depth.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "core/check.h"

namespace moert::spec {
namespace {

template <typename T>
std::string value_text(T value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void check_pass(int num_proposed, int num_accepted) {
  MOERT_CHECK(num_proposed >= 0 && num_accepted >= 0 && num_accepted <= num_proposed,
              "num_accepted = " << num_accepted << " must be in [0, num_proposed = " << num_proposed << "]");
}

// Passes tested a prefix of the drafts: a + 1 positions after a rejection, all k otherwise.
int num_tested(int num_proposed, int num_accepted) {
  return num_accepted < num_proposed ? num_accepted + 1 : num_proposed;
}

double ratio_or_zero(int64_t numerator, int64_t denominator) {
  return denominator > 0 ? static_cast<double>(numerator) / static_cast<double>(denominator) : 0.0;
}

int64_t counter_at(const std::vector<int64_t>& counters, int position) {
  MOERT_CHECK(position >= 0, "position = " << position << " must be >= 0");
  return static_cast<size_t>(position) < counters.size() ? counters[static_cast<size_t>(position)] : 0;
}

}  // namespace

double expected_tokens_per_pass(double alpha, int num_draft) {
  MOERT_CHECK(alpha >= 0.0 && alpha <= 1.0, "alpha = " << alpha << " must be in [0, 1]");
  MOERT_CHECK(num_draft >= 0, "num_draft = " << num_draft << " must be >= 0");
  double total = 0.0;
  double power = 1.0;  // alpha^i
  for (int i = 0; i <= num_draft; ++i) {
    total += power;
    power *= alpha;
  }
  return total;
}

double SpecCostModel::verify_cost_at(int num_draft) const {
  if (verify_cost.empty()) return 1.0;
  MOERT_CHECK(num_draft >= 0 && static_cast<size_t>(num_draft) < verify_cost.size(),
              "num_draft = " << num_draft << " outside verify_cost[0, " << verify_cost.size() << ")");
  return verify_cost[static_cast<size_t>(num_draft)];
}

Status validate_cost_model(const SpecCostModel& model, int max_num_draft) {
  if (!std::isfinite(model.draft_step_cost) || model.draft_step_cost < 0.0) {
    return invalid_argument("draft_step_cost = " + value_text(model.draft_step_cost) + " must be finite and >= 0");
  }
  for (size_t k = 0; k < model.verify_cost.size(); ++k) {
    const double v = model.verify_cost[k];
    if (!std::isfinite(v) || v <= 0.0) {
      return invalid_argument("verify_cost[" + std::to_string(k) + "] = " + value_text(v) + " must be finite and > 0");
    }
  }
  if (!model.verify_cost.empty() && static_cast<int64_t>(model.verify_cost.size()) <= max_num_draft) {
    return invalid_argument("verify_cost has " + std::to_string(model.verify_cost.size()) +
                            " entries, needs max_num_draft + 1 = " + std::to_string(max_num_draft + 1));
  }
  return Status::ok();
}

double expected_speedup(double alpha, int num_draft, const SpecCostModel& model) {
  const double cost = num_draft * model.draft_step_cost + model.verify_cost_at(num_draft);
  return expected_tokens_per_pass(alpha, num_draft) / cost;
}

DepthChoice choose_draft_depth(double alpha, const SpecCostModel& model, int max_num_draft, double min_gain) {
  MOERT_CHECK(max_num_draft >= 1, "max_num_draft = " << max_num_draft << " must be >= 1");
  MOERT_CHECK(min_gain >= 0.0, "min_gain = " << min_gain << " must be >= 0");
  const Status valid = validate_cost_model(model, max_num_draft);
  MOERT_CHECK(valid.is_ok(), "" << valid.message());
  DepthChoice best{1, expected_speedup(alpha, 1, model)};
  for (int k = 2; k <= max_num_draft; ++k) {
    const double speedup = expected_speedup(alpha, k, model);
    if (speedup > best.speedup) best = {k, speedup};  // strict: the smaller K wins ties
  }
  if (!(best.speedup > 1.0 + min_gain)) return {};
  return best;
}

AcceptanceRateEstimator::AcceptanceRateEstimator(double decay, double prior_alpha, double prior_trials)
    : decay_(decay), weighted_accepted_(prior_alpha * prior_trials), weighted_tested_(prior_trials) {
  MOERT_CHECK(decay > 0.0 && decay <= 1.0, "decay = " << decay << " must be in (0, 1]");
  MOERT_CHECK(prior_alpha >= 0.0 && prior_alpha <= 1.0, "prior_alpha = " << prior_alpha << " must be in [0, 1]");
  MOERT_CHECK(prior_trials > 0.0 && std::isfinite(prior_trials), "prior_trials = " << prior_trials << " must be > 0");
}

void AcceptanceRateEstimator::observe(int num_proposed, int num_accepted) {
  check_pass(num_proposed, num_accepted);
  if (num_proposed == 0) return;
  weighted_accepted_ = decay_ * weighted_accepted_ + num_accepted;
  weighted_tested_ = decay_ * weighted_tested_ + num_tested(num_proposed, num_accepted);
}

void AcceptanceStats::record(int num_proposed, int num_accepted) {
  check_pass(num_proposed, num_accepted);
  ++num_passes_;
  num_draft_tokens_ += num_proposed;
  num_accepted_tokens_ += num_accepted;
  if (static_cast<size_t>(num_proposed) > proposed_at_.size()) {
    proposed_at_.resize(static_cast<size_t>(num_proposed), 0);
    tested_at_.resize(static_cast<size_t>(num_proposed), 0);
    accepted_at_.resize(static_cast<size_t>(num_proposed), 0);
  }
  const int tested = num_tested(num_proposed, num_accepted);
  for (int i = 0; i < num_proposed; ++i) {
    const size_t at = static_cast<size_t>(i);
    ++proposed_at_[at];
    if (i < tested) ++tested_at_[at];
    if (i < num_accepted) ++accepted_at_[at];
  }
}

int64_t AcceptanceStats::proposed_at(int position) const { return counter_at(proposed_at_, position); }
int64_t AcceptanceStats::tested_at(int position) const { return counter_at(tested_at_, position); }
int64_t AcceptanceStats::accepted_at(int position) const { return counter_at(accepted_at_, position); }

double AcceptanceStats::mean_accepted_per_pass() const { return ratio_or_zero(num_accepted_tokens_, num_passes_); }

double AcceptanceStats::mean_tokens_per_pass() const {
  return num_passes_ > 0 ? mean_accepted_per_pass() + 1.0 : 0.0;
}

double AcceptanceStats::acceptance_rate() const { return ratio_or_zero(num_accepted_tokens_, num_draft_tokens_); }

double AcceptanceStats::acceptance_rate_at(int position) const {
  return ratio_or_zero(accepted_at(position), proposed_at(position));
}

double AcceptanceStats::conditional_acceptance_at(int position) const {
  return ratio_or_zero(accepted_at(position), tested_at(position));
}

void AcceptanceStats::merge(const AcceptanceStats& other) {
  num_passes_ += other.num_passes_;
  num_draft_tokens_ += other.num_draft_tokens_;
  num_accepted_tokens_ += other.num_accepted_tokens_;
  const size_t positions = std::max(proposed_at_.size(), other.proposed_at_.size());
  for (std::vector<int64_t>* v : {&proposed_at_, &tested_at_, &accepted_at_}) v->resize(positions, 0);
  for (size_t i = 0; i < other.proposed_at_.size(); ++i) {
    proposed_at_[i] += other.proposed_at_[i];
    tested_at_[i] += other.tested_at_[i];
    accepted_at_[i] += other.accepted_at_[i];
  }
}

std::vector<int64_t> AcceptanceStats::to_counts() const {
  std::vector<int64_t> counts{num_passes_, num_draft_tokens_, num_accepted_tokens_,
                              static_cast<int64_t>(proposed_at_.size())};
  for (const std::vector<int64_t>* v : {&proposed_at_, &tested_at_, &accepted_at_}) {
    counts.insert(counts.end(), v->begin(), v->end());
  }
  return counts;
}

bool AcceptanceStats::from_counts(std::span<const int64_t> counts, AcceptanceStats* out) {
  if (counts.size() < 4 || counts[3] < 0 || counts.size() != 4 + 3 * static_cast<size_t>(counts[3])) return false;
  const size_t positions = static_cast<size_t>(counts[3]);
  AcceptanceStats stats;
  stats.num_passes_ = counts[0];
  stats.num_draft_tokens_ = counts[1];
  stats.num_accepted_tokens_ = counts[2];
  stats.proposed_at_.assign(counts.begin() + 4, counts.begin() + 4 + positions);
  stats.tested_at_.assign(counts.begin() + 4 + positions, counts.begin() + 4 + 2 * positions);
  stats.accepted_at_.assign(counts.begin() + 4 + 2 * positions, counts.end());
  *out = std::move(stats);
  return true;
}

}  // namespace moert::spec
