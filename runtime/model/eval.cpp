#include "runtime/model/eval.h"

#include <cmath>

namespace moert {
namespace {

// log-softmax of one row, float64.
void log_softmax(const float* logits, int64_t vocab, std::vector<double>& out) {
  double max_logit = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += std::exp(logits[i] - max_logit);
  const double log_total = std::log(total) + max_logit;
  out.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) out[static_cast<size_t>(i)] = logits[i] - log_total;
}

}  // namespace

void compare_logit_rows(const float* reference, const float* candidate, int64_t rows, int64_t vocab,
                        DistributionComparison* out) {
  std::vector<double> log_p, log_q;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p_row = reference + r * vocab;
    const float* q_row = candidate + r * vocab;
    log_softmax(p_row, vocab, log_p);
    log_softmax(q_row, vocab, log_q);
    double kl = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double p = std::exp(log_p[static_cast<size_t>(i)]);
      if (p > 0.0) kl += p * (log_p[static_cast<size_t>(i)] - log_q[static_cast<size_t>(i)]);
    }
    out->sum_kl += std::max(0.0, kl);
    out->top1_agreements += argmax_lowest_index(p_row, vocab) == argmax_lowest_index(q_row, vocab) ? 1 : 0;
    ++out->positions;
  }
}

Result<DistributionComparison> compare_models(const ReferenceForward& reference, const ReferenceForward& candidate,
                                              const std::vector<std::vector<int32_t>>& sequences) {
  if (reference.config().vocab_size != candidate.config().vocab_size) {
    return invalid_argument("vocabularies differ: " + std::to_string(reference.config().vocab_size) + " vs " +
                            std::to_string(candidate.config().vocab_size));
  }
  DistributionComparison comparison;
  for (const std::vector<int32_t>& sequence : sequences) {
    DenseKvCache ref_cache = reference.new_cache();
    DenseKvCache cand_cache = candidate.new_cache();
    MOERT_ASSIGN_OR_RETURN(std::vector<float> ref_logits, reference.forward(ref_cache, sequence));
    MOERT_ASSIGN_OR_RETURN(std::vector<float> cand_logits, candidate.forward(cand_cache, sequence));
    compare_logit_rows(ref_logits.data(), cand_logits.data(), static_cast<int64_t>(sequence.size()),
                       reference.config().vocab_size, &comparison);
  }
  return comparison;
}

}  // namespace moert
