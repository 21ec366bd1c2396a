// The single-rank reference forward: the simple, exact F32 transformer that every engine
// path is tested against. Layer by layer as in DESIGN.md "One step on one rank", with a
// contiguous per-sequence K/V history instead of paged blocks.
// Shapes: T new tokens, D hidden, V vocab, H/KVH heads, Dh head_dim, E experts, K top-k.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/rope.h"
#include "runtime/core/status.h"
#include "runtime/core/thread_pool.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

namespace moert {

// K/V of one sequence for every layer; row p holds position p.
struct DenseKvCache {
  std::vector<std::vector<float>> keys;    // [layers][L * KVH * Dh]
  std::vector<std::vector<float>> values;  // [layers][L * KVH * Dh]
  int64_t length = 0;                      // positions already written
};

class ReferenceForward {
 public:
  // config, weights and pool must outlive this object.
  ReferenceForward(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool);

  DenseKvCache new_cache() const;

  // Runs `tokens` at positions cache.length .. cache.length + T - 1, appends their K/V and
  // returns the logits of every new position, [T, V] row-major. Token ids must lie in [0, V).
  Result<std::vector<float>> forward(DenseKvCache& cache, const std::vector<int32_t>& tokens) const;

  const ModelConfig& config() const { return config_; }

 private:
  void attention_block(int layer, DenseKvCache& cache, int64_t num_tokens, std::vector<float>& x) const;
  void ffn_block(int layer, int64_t num_tokens, std::vector<float>& x) const;
  void moe_ffn(const MoeWeights& moe, const float* h, int64_t num_tokens, float* out) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  attention::RotaryEmbedding rope_;
};

// x: [T, D] normalised in place: x * rsqrt(mean(x^2) + eps) * weight.
void rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps);

// Index of the largest value; the lowest index wins ties.
int32_t argmax_lowest_index(const float* values, int64_t count);

struct GreedyOutput {
  std::vector<int32_t> gen_tokens;   // [n_gen]
  std::vector<float> prompt_logits;  // [n_prompt, V]: row i = logits after prompt token i
  std::vector<float> gen_logits;     // [n_gen, V]: row j = logits from which gen_tokens[j] was picked
};

// Scores the prompt and generates `num_generate` greedy tokens (no stop tokens).
Result<GreedyOutput> greedy_generate(const ReferenceForward& model, const std::vector<int32_t>& prompt,
                                     int num_generate);

}  // namespace moert
