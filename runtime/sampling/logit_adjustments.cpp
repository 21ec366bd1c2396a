#include "runtime/sampling/logit_adjustments.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/check.h"

namespace moert::sampling {

void adjust_logits(const float* logits, int vocab_size, const SamplingParams& p, std::span<const int32_t> prompt,
                   std::span<const int32_t> generated, std::vector<float>* adjusted) {
  MOERT_CHECK(logits != nullptr && adjusted != nullptr && vocab_size >= 1);
  adjusted->assign(logits, logits + vocab_size);
  float* row = adjusted->data();
  const auto in_vocab = [vocab_size](int32_t id) { return id >= 0 && id < vocab_size; };
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
    for (std::span<const int32_t> ids : {prompt, generated}) {
      for (int32_t id : ids) {
        if (in_vocab(id)) seen[static_cast<size_t>(id)] = true;
      }
    }
    for (int id = 0; id < vocab_size; ++id) {
      if (!seen[static_cast<size_t>(id)]) continue;
      row[id] = row[id] > 0.0f ? row[id] / p.repetition_penalty : row[id] * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : generated) {
      if (in_vocab(id)) ++counts[id];
    }
    for (const auto& [id, count] : counts) {
      row[id] -= static_cast<float>(static_cast<double>(p.frequency_penalty) * static_cast<double>(count) +
                                    static_cast<double>(p.presence_penalty));
    }
  }
  if (static_cast<int64_t>(generated.size()) < p.min_tokens) {
    std::vector<int32_t> masked;
    for (const std::vector<int32_t>* ids : {&p.stop_token_ids, &p.eos_token_ids}) {
      if (ids == &p.eos_token_ids && p.ignore_eos) continue;
      for (int32_t id : *ids) {
        if (in_vocab(id)) masked.push_back(id);
      }
    }
    bool any_left = false;
    for (int id = 0; id < vocab_size && !any_left; ++id) {
      if (row[id] == -std::numeric_limits<float>::infinity()) continue;
      any_left = std::find(masked.begin(), masked.end(), id) == masked.end();
    }
    if (any_left) {
      for (int32_t id : masked) row[id] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace moert::sampling
