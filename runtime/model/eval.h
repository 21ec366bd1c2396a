// Accuracy of one model against another over the same token sequences: mean KL divergence
// of the next-token distributions, KL(reference || candidate), and top-1 agreement.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runtime/model/reference_forward.h"

namespace moert {

struct DistributionComparison {
  int64_t positions = 0;
  double sum_kl = 0.0;         // nats
  int64_t top1_agreements = 0;
  double mean_kl() const { return positions > 0 ? sum_kl / positions : 0.0; }
  double top1_agreement() const { return positions > 0 ? static_cast<double>(top1_agreements) / positions : 0.0; }
};

// Accumulates rows of logits [rows, vocab] (softmax in float64, lowest id wins argmax ties).
void compare_logit_rows(const float* reference, const float* candidate, int64_t rows, int64_t vocab,
                        DistributionComparison* out);

// Runs both models over `sequences` (every position of each) and compares them.
Result<DistributionComparison> compare_models(const ReferenceForward& reference, const ReferenceForward& candidate,
                                              const std::vector<std::vector<int32_t>>& sequences);

}  // namespace moert
