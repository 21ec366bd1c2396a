// Log-probabilities of sampled tokens (docs/generation.md): log-softmax of the model's raw
// logits row (before penalties, temperature, top-k and top-p, as vLLM reports them by
// default), computed in double.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace moert::sampling {

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0.0;
  // The `top` most likely ids of the row with their log-probabilities, most likely first
  // (ties: lower id first).
  std::vector<std::pair<int32_t, double>> top;
};

// Precondition: vocab_size >= 1, token in [0, vocab_size), 0 <= top; logits hold no NaN or
// +inf and at least one finite value (-inf is probability 0: log-probability -inf).
TokenLogprob token_logprob(const float* logits, int vocab_size, int32_t token, int top);

}  // namespace moert::sampling
