// Helpers of the speculative tests that run the whole engine (spec_engine_test,
// mtp_engine_test): deterministic request mixes and a two-sample distribution check.
#pragma once

#include <boost/math/special_functions/gamma.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/model/generator.h"

namespace moert::testing {

// Engine requests: prompts of 3..max_prompt_length tokens (every third repeats a phrase of 2..7
// tokens, so n-gram drafts match; the rest pseudo-random below `vocab`), max_tokens
// 4..max_new_tokens; with sampled_every_fourth, every fourth request samples (temperature 0.9,
// top-k 50, its index as seed). Deterministic in `seed`.
inline std::vector<engine::Request> mixed_requests(int count, int vocab, uint64_t seed, int max_prompt_length,
                                                   int max_new_tokens, bool sampled_every_fourth = false) {
  std::vector<engine::Request> requests;
  uint64_t state = seed * 2654435761u + 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % 1000003);
  };
  for (int r = 0; r < count; ++r) {
    engine::Request request;
    request.id = "r" + std::to_string(r);
    const int length = 3 + next() % (max_prompt_length - 2);
    const int phrase = 2 + next() % 6;
    for (int i = 0; i < length; ++i) {
      request.prompt.push_back(r % 3 == 0 && i >= phrase ? request.prompt[static_cast<size_t>(i % phrase)] : next() % vocab);
    }
    request.params.max_tokens = 4 + next() % (max_new_tokens - 3);
    if (sampled_every_fourth && r % 4 == 3) {
      request.params.temperature = 0.9f;
      request.params.top_k = 50;
      request.params.seed = r;
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

// The engine of the speculative tests: 512 KV blocks, 16 sequences, chunked prefills of
// `max_batched_tokens` sharing steps with verification, up to `num_draft` drafts (adaptive:
// probing with min(4, num_draft)).
inline engine::EngineConfig spec_engine_config(int max_batched_tokens, int num_draft, bool adaptive) {
  engine::EngineConfig c;
  c.num_kv_blocks = 512;
  c.scheduler.max_batched_tokens = max_batched_tokens;
  c.scheduler.max_seqs = 16;
  c.spec.max_num_draft = num_draft;
  c.spec.adaptive = adaptive;
  c.spec.probe_num_draft = std::min(4, num_draft);
  return c;
}

// A draft-friendly generated target: from layer 1 on, the layers' residual writes are scaled
// by 0.3, so a model truncated after layer 0 (or an MTP layer built from it) drafts well but
// not perfectly.
inline WeightShaping draft_friendly_shaping() {
  WeightShaping shaping;
  shaping.faithful_layers = 1;
  shaping.late_layer_scale = 0.3f;
  return shaping;
}

// Two-sample chi-square homogeneity p-value of two histograms over the same categories
// (categories empty in both are left out).
inline double homogeneity_p_value(const std::map<int32_t, int64_t>& a, const std::map<int32_t, int64_t>& b) {
  std::map<int32_t, std::pair<double, double>> both;
  double total_a = 0, total_b = 0;
  for (const auto& [token, count] : a) both[token].first = static_cast<double>(count), total_a += static_cast<double>(count);
  for (const auto& [token, count] : b) both[token].second = static_cast<double>(count), total_b += static_cast<double>(count);
  double statistic = 0.0;
  for (const auto& [token, counts] : both) {
    const double pooled = (counts.first + counts.second) / (total_a + total_b);
    const double expect_a = pooled * total_a, expect_b = pooled * total_b;
    statistic += (counts.first - expect_a) * (counts.first - expect_a) / expect_a +
                 (counts.second - expect_b) * (counts.second - expect_b) / expect_b;
  }
  const double df = static_cast<double>(both.size()) - 1.0;
  return df > 0 ? boost::math::gamma_q(df / 2.0, statistic / 2.0) : 1.0;
}

}  // namespace moert::testing
