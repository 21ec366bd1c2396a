// History-dependent changes to one row of logits before sampling (docs/generation.md):
//   repetition_penalty r (CTRL, as Hugging Face and vLLM apply it): every token id that occurs
//     in the prompt or in the generated tokens has its logit divided by r when positive and
//     multiplied by r otherwise;
//   frequency_penalty f and presence_penalty p (OpenAI): every id generated c > 0 times loses
//     f * c + p;
//   min_tokens: while fewer than min_tokens tokens were generated, the stop and EOS ids
//     (sampler.h, is_stop_token) get -inf, so no stop rule can fire early.
// Applied in that order, to a copy of the row; temperature, top-k and top-p follow. Greedy
// requests are adjusted too (the argmax is taken after the penalties).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampler.h"

namespace moert::sampling {

// Writes the adjusted row into *adjusted ([V]). Precondition: p validated and
// p.adjusts_logits(); token ids outside [0, V) in the history are ignored. If masking would
// leave no finite logit, the stop ids stay unmasked (a vocabulary of stop tokens only).
void adjust_logits(const float* logits, int vocab_size, const SamplingParams& p, std::span<const int32_t> prompt,
                   std::span<const int32_t> generated, std::vector<float>* adjusted);

}  // namespace moert::sampling
