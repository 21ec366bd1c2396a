#include "runtime/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace moert::sampling {

TokenLogprob token_logprob(const float* logits, int vocab_size, int32_t token, int top) {
  MOERT_CHECK(logits != nullptr && vocab_size >= 1 && token >= 0 && token < vocab_size && top >= 0);
  double max_logit = -INFINITY;
  for (int i = 0; i < vocab_size; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  MOERT_CHECK(std::isfinite(max_logit), "no finite logit in a row of " << vocab_size);
  double sum = 0.0;
  for (int i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_normaliser = max_logit + std::log(sum);
  const auto logprob_of = [&](int32_t id) { return static_cast<double>(logits[id]) - log_normaliser; };
  TokenLogprob result;
  result.token = token;
  result.logprob = logprob_of(token);
  const int count = std::min(top, vocab_size);
  if (count > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
    std::iota(ids.begin(), ids.end(), 0);
    const auto more_likely = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), more_likely);
    for (int k = 0; k < count; ++k) result.top.emplace_back(ids[static_cast<size_t>(k)], logprob_of(ids[static_cast<size_t>(k)]));
  }
  return result;
}

}  // namespace moert::sampling
